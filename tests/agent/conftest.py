"""Integration fixtures: the real scheduler around real agents.

- ``scheduler``: ``ensure_topology`` on the Pub/Sub stand-in, the functions ``on_job_submitted``,
  ``on_heartbeat`` and ``on_stop_requested`` each under functions-framework as its own process on this
  test's Postgres database, and the event bridge delivering their topics to them. The lost-job sweep
  is ``zen.on_scale_tick()`` on the test's in-process ``zen`` (same database and configuration).
- ``agents``: ``python -m zen.agent`` subprocesses with a VM identity in their environment, as the
  Compute stand-in starts them; all are stopped (SIGTERM, then SIGKILL) at the end of the test.

Every test has its own project (topics, subscriptions) and database, and a configuration file with
short deadlines that the functions and agents read through ``ZEN_CONFIG``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.agent.helpers import wait_for
from zen.core.clock import utc_now
from zen.core.config import Deadlines, ZenConfig, load_config
from zen.core.models import Job
from zen.store import repository
from zen_dev.local.bridge import DeliveryPolicy, EventBridge, Route
from zen_dev.local.functions_server import (AGENT_WARM, WARM_CORE, ForkedGroup, Function, FunctionGroup, WarmForks,
                                            start_logged)
from zen_dev.local.topology import ensure_topology

CLUSTER = "4xa100-40gb"
FAST = DeliveryPolicy(max_delivery_attempts=5, minimum_backoff_s=0.1, maximum_backoff_s=0.4, ack_deadline_s=10)
# A heartbeat timeout of 10 s: with 3 s, the agents fenced themselves (or Zen lost their attempts) when a
# fresh-clone run's four test workers kept the 2 cores busy, in a different test each run.
DEADLINES = Deadlines(heartbeat_timeout_s=10, boot_timeout_s=600, idle_timeout_s=300, stop_timeout_s=8,
                      agent_heartbeat_s=0.3, stop_grace_s=0.5)
AGENT_TUNING = {
    "ZEN_AGENT_HEARTBEAT_S": "0.5", "ZEN_AGENT_STOP_GRACE_S": "0.5", "ZEN_AGENT_POLL_S": "0.1",
    "ZEN_AGENT_CLAIM_TIMEOUT_S": "5", "ZEN_AGENT_VM_HEARTBEAT_S": "5",
    "ZEN_AGENT_LOCAL": "1",  # plain processes: no docker here (an agent runs containers unless told)
    # No GPU check (zen.agent.gpucheck) unless a test gives its own: with ZEN_AGENT_LOCAL=0 the agent would run this
    # machine's own nvidia-smi, if any, and judge a test job's failure by this machine's GPUs.
    "ZEN_AGENT_NVIDIA_SMI": "/nonexistent/nvidia-smi",
}


@pytest.fixture
def clock():
    """The sweep runs on real time here: the functions stamp heartbeats with their real clocks."""
    return utc_now


@pytest.fixture
def config(project):
    return load_config().model_copy(update={"project": project, "deadlines": DEADLINES})


def shared_vms_config(project: str, shared: str = "8xa100-40gb") -> ZenConfig:
    """The agent tests' configuration with ``shared`` running two jobs at once, and no 4-GPU A100 cluster (a 4-GPU
    A100 job lands on the 8-GPU VMs): a test module's ``config`` fixture for VMs of several jobs."""
    raw = json.loads(load_config().model_copy(update={"project": project, "deadlines": DEADLINES}).model_dump_json())
    raw["clusters"] = [c for c in raw["clusters"] if c["name"] != "4xa100-40gb"]
    for cluster in raw["clusters"]:
        if cluster["name"] == shared:
            cluster["max_jobs_per_vm"] = 2
    return ZenConfig.model_validate(raw)


@pytest.fixture
def config_file(config, tmp_path) -> Path:
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return path


@dataclass
class Scheduler:
    config: object
    db: object
    zen: object
    client: object  # a PublisherClient, as users publish
    function_logs: tuple[Path, ...] = ()  # the functions' servers' logs, quoted when a wait fails

    def submit(self, job_id: str, command: list[str], **fields) -> None:
        request = {"job_id": job_id, "user_id": "alice", "cluster": CLUSTER, "command": command, **fields}
        self._publish(self.config.topics.job_submitted, request)

    def stop(self, job_id: str, reason: str = "test stop") -> None:
        self._publish(self.config.topics.job_stop, {"job_id": job_id, "reason": reason})

    def _publish(self, topic: str, payload: dict) -> None:
        path = self.client.topic_path(self.config.project, topic)
        self.client.publish(path, json.dumps(payload).encode()).result(timeout=10)

    def job(self, job_id: str) -> Job | None:
        with self.db.transaction() as session:
            return repository.get_job(session, job_id)

    def wait_status(self, job_id: str, *statuses: str, timeout_s: float = 45.0) -> Job:
        """The job once its status is one of ``statuses``. 45 s: a submission on a loaded 2-core machine (four
        test workers) once took more than 20 s to reach the database; a passing wait returns at once."""
        def reached():
            job = self.job(job_id)
            return job if job is not None and job.status.value in statuses else None

        try:
            return wait_for(reached, timeout_s, 0.1, what=f"{job_id} in {statuses}")
        except AssertionError:
            job = self.job(job_id)
            said = [line for path in self.function_logs if path.exists()
                    for line in path.read_text(errors="replace").splitlines()[-5:]]
            raise AssertionError(f"{job_id} is {job.status.value if job else 'missing'}, not in {statuses} after "
                                 f"{timeout_s}s; history: {self.history(job_id)}; the functions' last "
                                 f"lines: {said}") from None

    def history(self, job_id: str) -> list[tuple[int, str, str]]:
        with self.db.transaction() as session:
            rows = repository.job_history(session, job_id)
        return [(row["attempt"], row["to_status"], row["reason"]) for row in rows]

    def vm(self, name: str) -> dict | None:
        with self.db.transaction() as session:
            return next((row for row in repository.list_vms(session) if row["name"] == name), None)

    def sweep(self) -> None:
        """One scale tick: resend the outbox and mark silent jobs LOST."""
        self.zen.on_scale_tick()


@pytest.fixture(scope="session")
def function_forks():
    """One process per test worker that imported the functions' libraries once and forks each test's group."""
    with WarmForks(WARM_CORE) as forks:
        yield forks


@pytest.fixture(scope="session")
def agent_forks():
    """One process per test worker that imported the agent's libraries once and forks each ``python -m zen.agent``
    of the tests (``Agents``), as that command runs it (``WarmForks.run_module``)."""
    with WarmForks(AGENT_WARM) as forks:
        yield forks


@pytest.fixture
def scheduler(config, config_file, db_url, db, zen, pubsub_server, pubsub_clients, function_forks, tmp_path):
    publisher_client, subscriber_client = pubsub_clients
    ensure_topology(config, publisher_client, subscriber_client)
    env = {"ZEN_DATABASE_URL": db_url, "ZEN_PROJECT": config.project, "ZEN_CONFIG": str(config_file),
           "PUBSUB_EMULATOR_HOST": pubsub_server.address,
           "ZEN_SCALING": "off"}  # no Compute here: agents are started by the tests, not by scaling
    topics = config.topics
    targets = {topics.job_submitted: "on_job_submitted", topics.heartbeats: "on_heartbeat",
               topics.job_stop: "on_stop_requested"}
    functions = [Function(target, 0, tmp_path / f"{target}.log") for target in targets.values()]
    with FunctionGroup(functions, env, forks=function_forks) as group:  # no Compute here (ZEN_SCALING=off)
        routes = [Route(topic, group.url(target)) for topic, target in targets.items()]
        with EventBridge(config.project, routes, FAST, publisher_client, subscriber_client):
            yield Scheduler(config, db, zen, publisher_client,
                            tuple(function.log_path for function in functions if function.log_path))


@dataclass
class AgentProcess:
    vm: str
    process: subprocess.Popen | ForkedGroup
    log_path: Path
    region: str = "us-central1"
    env: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def logs(self) -> list[dict]:
        lines = self.log_path.read_text().splitlines() if self.log_path.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]

    def said(self, message: str, **fields) -> list[dict]:
        return [line for line in self.logs()
                if line["message"] == message and all(line.get(k) == v for k, v in fields.items())]

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM, as a VM shutdown does; SIGKILL the group if it does not exit in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the agent alone: its job must die with it (the launch shim's parent-death signal)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


class Agents:
    def __init__(self, config, config_file: Path, pubsub_address: str, log_dir: Path, forks: WarmForks | None = None):
        self._forks = forks
        self._config = config
        self._config_file = config_file
        self._pubsub_address = pubsub_address
        self._log_dir = log_dir
        self.started: list[AgentProcess] = []

    def start(self, vm: str, region: str = "us-central1", zone: str | None = None, **tuning: str) -> AgentProcess:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("ZEN_", "GCE_METADATA"))}
        env.update(AGENT_TUNING)
        env.update({
            "ZEN_VM_NAME": vm, "ZEN_CLUSTER": CLUSTER, "ZEN_REGION": region, "ZEN_ZONE": zone or f"{region}-a",
            "ZEN_PROJECT": self._config.project, "ZEN_CONFIG": str(self._config_file),
            "PUBSUB_EMULATOR_HOST": self._pubsub_address,
            # The test's own, as a VM's disk is its own: what an agent keeps there (its journal, the attempts it ran:
            # zen.agent.ranlog) is not another test's agent's of the same name.
            "ZEN_AGENT_WORK_DIR": str(self._log_dir / "agents-work"), **tuning,
        })
        log_path = self._log_dir / f"agent-{vm}.log"
        process = start_logged([sys.executable, "-m", "zen.agent"], env, log_path, self._forks)
        agent = AgentProcess(vm, process, log_path, region, env)
        self.started.append(agent)
        return agent

    def stop_all(self) -> None:
        for agent in self.started:
            if agent.process.poll() is None:
                agent.process.send_signal(signal.SIGTERM)
        for agent in self.started:
            try:
                agent.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.process.wait(10)


@pytest.fixture
def agents(config, config_file, pubsub_server, agent_forks, tmp_path):
    fleet = Agents(config, config_file, pubsub_server.address, tmp_path, agent_forks)
    yield fleet
    fleet.stop_all()



@pytest.fixture
def storage(monkeypatch):
    """The Cloud Storage stand-in, with the official client pointed at it (STORAGE_EMULATOR_HOST)."""
    from zen_dev.local.storage import StorageStandIn

    with StorageStandIn() as standin:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", standin.address)
        yield standin
