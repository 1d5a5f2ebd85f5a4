"""The agent's tunables, read once from ``ZEN_AGENT_*`` environment variables (``AgentSettings.from_env``),
and the configuration's periods and deadline laid over them (``with_deadlines``), refused when they
leave the fence no room, or the VM's heartbeats too far apart for the silence Zen allows it.

Every variable, its default and its range: docs/reference/agent.md, "Tunables".
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field, replace
from typing import Literal, Mapping, overload

from zen.agent.cache import IMAGES_KEEP, REPORTED
from zen.agent.diskquota import DISK_SHARE, LOOK_S
from zen.agent.output import OutputLimits
from zen.core import lease
from zen.core.config import Deadlines
from zen.core.errors import ConfigError

PULL_STALL_S = 300.0  # kubelet's image-pull-progress-deadline was 60 s: a registry's slow minutes are not a stall
MAX_LINE_BYTES = 200 * 1024  # an output line is one Cloud Logging entry (256 KB at most, labels included)
MAX_TAIL_BYTES = 7000  # Heartbeat.message holds 8192 characters; leave room for a one-line preface
METADATA_WAIT_S = 90.0  # the startup script's metadata reads give up after 90 s too (startup.sh, METADATA_TRIES)


def _deadline(name: str) -> float:
    """The default of one of the configuration's deadlines (written once, in ``zen.core.config.Deadlines``)."""
    return float(Deadlines.model_fields[name].default)


def work_dir_of(env: Mapping[str, str]) -> str:
    """``ZEN_AGENT_WORK_DIR``, else ``<temp dir>/zen-agent``: readable before anything else (``zen.agent.__main__``)."""
    return env.get("ZEN_AGENT_WORK_DIR") or os.path.join(tempfile.gettempdir(), "zen-agent")


@dataclass(frozen=True)
class AgentSettings:
    heartbeat_s: float = _deadline("agent_heartbeat_s")  # the configuration's (with_deadlines), unless set here
    stop_grace_s: float = _deadline("stop_grace_s")
    poll_s: float = 1.0
    claim_timeout_s: float = 20.0
    claim_tries: int = 3
    lease_s: int = 60
    vm_heartbeat_s: float = _deadline("vm_heartbeat_s")
    tail_bytes: int = 4096
    local: bool | None = None  # True (ZEN_AGENT_LOCAL=1) only: host processes; else containers
    docker: str = "docker"
    output: OutputLimits = OutputLimits()
    work_dir: str = field(default_factory=lambda: os.path.join(tempfile.gettempdir(), "zen-agent"))
    max_jobs_per_day: int | None = None  # None: the template's or the configuration's (zen.agent.limits)
    max_gpu_hours_per_day: float | None = None
    max_jobs_per_vm: int | None = None  # None: the template's or the configuration's (zen.agent.slots)
    gpus: int | None = None
    cache_dir: str | None = None  # None: <work_dir>/.cache/<VM name>
    cache_bytes: int = 20_000_000_000
    images_keep: int = IMAGES_KEEP
    heartbeat_timeout_s: float = _deadline("heartbeat_timeout_s")  # the configuration's
    disk_share: float = DISK_SHARE  # of the work disk, for the jobs' directories (zen.agent.diskquota)
    disk_per_job_bytes: int | None = None  # None: disk_share of the disk / max_jobs_per_vm
    disk_look_s: float = LOOK_S  # between two measurements of the jobs' directories
    tasks_per_job: int | None = None  # None: the slot's share of the kernel's (zen.agent.container.slot_limits)
    # Written to power the VM off when a fenced job's container outlives docker's kill (zen.agent.leftover.fence_vm;
    # the startup script's root unit watches it); None (local mode, a VM without systemd): the VM is only retired.
    fence_file: str | None = None
    # The GPUs' check after a job's failure (zen.agent.gpucheck); None: ``nvidia-smi``, and none in local mode.
    nvidia_smi: str | None = None
    # A job's image pull with no progress for this long is cancelled, the attempt requeued (zen.agent.imagepull).
    pull_stall_s: float = PULL_STALL_S
    # How long the agent's start waits for a metadata server that gives no answer (its identity, its template's
    # attributes), as the startup script's reads do, before it exits (zen.agent.identity.MetadataUnavailable).
    metadata_wait_s: float = METADATA_WAIT_S

    def cache_path(self, vm: str) -> str:
        """One cache per VM, even where VMs share a disk (the local stack's)."""
        return self.cache_dir or os.path.join(self.work_dir, ".cache", vm)

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
            if not math.isfinite(value):  # nan passes every bound, and a wait of nan or inf never ends
                raise ConfigError(f"{name}={raw!r} is not a number")
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
        images_keep = number("ZEN_AGENT_IMAGES_KEEP", cls.images_keep, integer=True)
        if images_keep > REPORTED:
            raise ConfigError(f"ZEN_AGENT_IMAGES_KEEP must be at most {REPORTED} (what a VM heartbeat reports)")
        disk_share = number("ZEN_AGENT_DISK_SHARE", cls.disk_share)
        if disk_share > 1:
            raise ConfigError("ZEN_AGENT_DISK_SHARE must be at most 1 (the jobs' part of the work disk)")
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
            docker=env.get("ZEN_AGENT_DOCKER") or cls.docker,
            output=output_limits(number),
            work_dir=work_dir_of(env),
            max_jobs_per_day=parse_limit("ZEN_AGENT_MAX_JOBS_PER_DAY", env.get("ZEN_AGENT_MAX_JOBS_PER_DAY", ""),
                                         integer=True),
            cache_dir=env.get("ZEN_AGENT_CACHE_DIR") or None,
            cache_bytes=number("ZEN_AGENT_CACHE_BYTES", cls.cache_bytes, minimum=-1, integer=True),
            images_keep=images_keep,
            max_gpu_hours_per_day=parse_limit("ZEN_AGENT_MAX_GPU_HOURS_PER_DAY",
                                              env.get("ZEN_AGENT_MAX_GPU_HOURS_PER_DAY", ""), integer=False),
            max_jobs_per_vm=parse_limit("ZEN_AGENT_MAX_JOBS_PER_VM", env.get("ZEN_AGENT_MAX_JOBS_PER_VM", ""),
                                        integer=True),
            gpus=parse_limit("ZEN_AGENT_GPUS", env.get("ZEN_AGENT_GPUS", ""), integer=True),
            disk_share=disk_share,
            disk_per_job_bytes=parse_limit("ZEN_AGENT_DISK_PER_JOB_BYTES",
                                           env.get("ZEN_AGENT_DISK_PER_JOB_BYTES", ""), integer=True),
            disk_look_s=number("ZEN_AGENT_DISK_LOOK_S", cls.disk_look_s),
            tasks_per_job=parse_limit("ZEN_AGENT_TASKS_PER_JOB", env.get("ZEN_AGENT_TASKS_PER_JOB", ""), integer=True),
            fence_file=env.get("ZEN_AGENT_FENCE_FILE") or None,
            nvidia_smi=env.get("ZEN_AGENT_NVIDIA_SMI") or None,
            pull_stall_s=number("ZEN_AGENT_PULL_STALL_S", cls.pull_stall_s),
            metadata_wait_s=number("ZEN_AGENT_METADATA_WAIT_S", cls.metadata_wait_s),
        )


@overload
def parse_limit(source: str, raw: str, *, integer: Literal[True]) -> int | None: ...
@overload
def parse_limit(source: str, raw: str, *, integer: bool) -> int | float | None: ...


def parse_limit(source: str, raw: str, *, integer: bool) -> int | float | None:
    """A limit as written in a variable or attribute: empty is no limit, else a number above 0."""
    text = raw.strip()
    if not text:
        return None
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise ConfigError(f"{source}={raw!r} is not a {'whole ' if integer else ''}number") from None
    if not value > 0:  # also refuses NaN
        raise ConfigError(f"{source}={raw!r} must be above 0 (leave it empty for no limit)")
    return value


# The periods Zen's configuration sets for every agent (``zen.core.config.Deadlines``), and the variables that
# override them on one VM: (variable, AgentSettings field, Deadlines field).
PERIODS = (("ZEN_AGENT_HEARTBEAT_S", "heartbeat_s", "agent_heartbeat_s"),
           ("ZEN_AGENT_VM_HEARTBEAT_S", "vm_heartbeat_s", "vm_heartbeat_s"),
           ("ZEN_AGENT_STOP_GRACE_S", "stop_grace_s", "stop_grace_s"))


def with_deadlines(settings: AgentSettings, deadlines: Deadlines, env: Mapping[str, str]) -> AgentSettings:
    """``settings`` with Zen's deadline and the configuration's periods, but those the environment set;
    raises ``ConfigError`` when the result leaves the fence no room (``zen.core.lease.too_tight``): such an
    agent could not stop a job cut off from Zen before Zen runs it elsewhere, so it does not start; or when its
    stop grace leaves a stopped job no time to answer within ``stop_timeout_s`` (``zen.core.lease.stop_reason``); or
    when its VM heartbeat is too far apart for the silence after which Zen deletes an idle VM as gone
    (``zen.core.lease.vm_silence_reason``)."""
    periods = {field: getattr(deadlines, key) for variable, field, key in PERIODS if not env.get(variable, "").strip()}
    settings = replace(settings, heartbeat_timeout_s=deadlines.heartbeat_timeout_s, **periods)
    reason = (lease.tight_reason(settings.heartbeat_timeout_s, settings.stop_grace_s, settings.heartbeat_s)
              or lease.stop_reason(deadlines.stop_timeout_s, settings.stop_grace_s)
              or lease.vm_silence_reason(deadlines.heartbeat_timeout_s, deadlines.vm_heartbeat_s,
                                         settings.vm_heartbeat_s))
    if reason is not None:
        raise ConfigError(f"the agent's periods do not fit Zen's deadlines: {reason}")
    return settings


def output_limits(number) -> OutputLimits:
    base = OutputLimits()
    limits = OutputLimits(
        line_bytes=number("ZEN_AGENT_LOG_LINE_BYTES", base.line_bytes, minimum=63, integer=True),
        flush_s=number("ZEN_AGENT_LOG_FLUSH_S", base.flush_s),
        rate_lines=number("ZEN_AGENT_LOG_RATE_LINES", base.rate_lines, integer=True),
        hold_s=number("ZEN_AGENT_LOG_HOLD_S", base.hold_s),
        limit_bytes=number("ZEN_AGENT_LOG_LIMIT_BYTES", base.limit_bytes, minimum=1023, integer=True),
        tail_bytes=number("ZEN_AGENT_LOG_TAIL_BYTES", base.tail_bytes, minimum=63, integer=True),
    )
    if limits.tail_bytes * 2 > limits.limit_bytes:
        raise ConfigError("ZEN_AGENT_LOG_TAIL_BYTES must be at most half of ZEN_AGENT_LOG_LIMIT_BYTES")
    if limits.line_bytes > limits.tail_bytes:
        raise ConfigError("ZEN_AGENT_LOG_LINE_BYTES must be at most ZEN_AGENT_LOG_TAIL_BYTES")
    if limits.line_bytes > MAX_LINE_BYTES:
        raise ConfigError(f"ZEN_AGENT_LOG_LINE_BYTES must be at most {MAX_LINE_BYTES}: a line is one Cloud "
                          "Logging entry, which takes 256 KB at most with its labels")
    return limits
