"""The agent's tunables, read once from ``ZEN_AGENT_*`` environment variables.

| variable                      | default | meaning                                                  |
| ----------------------------- | ------- | -------------------------------------------------------- |
| ``ZEN_AGENT_HEARTBEAT_S``     | 30      | RUNNING heartbeat period (well below heartbeat_timeout_s) |
| ``ZEN_AGENT_STOP_GRACE_S``    | 10      | SIGTERM -> SIGKILL grace when stopping a job             |
| ``ZEN_AGENT_POLL_S``          | 1       | pause between pulls of the start subscription when idle  |
| ``ZEN_AGENT_CLAIM_TIMEOUT_S`` | 20      | wait for the answer to one CLAIMED                       |
| ``ZEN_AGENT_CLAIM_TRIES``     | 3       | CLAIMED sends before the start message is given back     |
| ``ZEN_AGENT_LEASE_S``         | 60      | ack deadline the agent keeps on the start message it holds |
| ``ZEN_AGENT_VM_HEARTBEAT_S``  | 60      | VM heartbeat period (besides every state change)         |
| ``ZEN_AGENT_TAIL_BYTES``      | 4096    | how much of the end of a job's output is reported        |
| ``ZEN_AGENT_LOCAL``           | auto    | 1: commands as plain subprocesses, images ignored; 0: images |
|                               |         | run with docker. Unset: 1 when the identity came from the |
|                               |         | environment (the local stack), else 0                    |
| ``ZEN_AGENT_JOB_LOG_DIR``     | unset   | also keep each attempt's full output in            |
|                               |         | ``<dir>/zen-<job>-<attempt>.log``                        |
| ``ZEN_AGENT_DOCKER``          | docker  | the docker CLI                                           |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from zen.errors import ConfigError

MAX_TAIL_BYTES = 7000  # Heartbeat.message holds 8192 characters; leave room for a one-line preface


@dataclass(frozen=True)
class AgentSettings:
    heartbeat_s: float = 30.0
    stop_grace_s: float = 10.0
    poll_s: float = 1.0
    claim_timeout_s: float = 20.0
    claim_tries: int = 3
    lease_s: int = 60
    vm_heartbeat_s: float = 60.0
    tail_bytes: int = 4096
    local: bool | None = None  # None: decided from where the identity came from
    job_log_dir: str | None = None
    docker: str = "docker"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "AgentSettings":
        def number(name: str, default: float, *, minimum: float = 0.0, integer: bool = False):
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = int(raw) if integer else float(raw)
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not a {'whole ' if integer else ''}number") from None
            if value <= minimum:
                raise ConfigError(f"{name}={raw!r} must be above {minimum:g}")
            return value

        local_raw = env.get("ZEN_AGENT_LOCAL", "").strip().lower()
        if local_raw and local_raw not in ("0", "1", "true", "false", "yes", "no"):
            raise ConfigError(f"ZEN_AGENT_LOCAL={local_raw!r}: use 1 or 0")
        lease_s = number("ZEN_AGENT_LEASE_S", cls.lease_s, minimum=9, integer=True)
        if lease_s > 600:
            raise ConfigError("ZEN_AGENT_LEASE_S must be at most 600 (Pub/Sub's longest ack deadline)")
        tail_bytes = number("ZEN_AGENT_TAIL_BYTES", cls.tail_bytes, minimum=15, integer=True)
        if tail_bytes > MAX_TAIL_BYTES:
            raise ConfigError(f"ZEN_AGENT_TAIL_BYTES must be at most {MAX_TAIL_BYTES} (a heartbeat's message limit)")
        return cls(
            heartbeat_s=number("ZEN_AGENT_HEARTBEAT_S", cls.heartbeat_s),
            stop_grace_s=number("ZEN_AGENT_STOP_GRACE_S", cls.stop_grace_s),
            poll_s=number("ZEN_AGENT_POLL_S", cls.poll_s),
            claim_timeout_s=number("ZEN_AGENT_CLAIM_TIMEOUT_S", cls.claim_timeout_s),
            claim_tries=number("ZEN_AGENT_CLAIM_TRIES", cls.claim_tries, integer=True),
            lease_s=lease_s,
            vm_heartbeat_s=number("ZEN_AGENT_VM_HEARTBEAT_S", cls.vm_heartbeat_s),
            tail_bytes=tail_bytes,
            local=None if not local_raw else local_raw in ("1", "true", "yes"),
            job_log_dir=env.get("ZEN_AGENT_JOB_LOG_DIR") or None,
            docker=env.get("ZEN_AGENT_DOCKER") or cls.docker,
        )
