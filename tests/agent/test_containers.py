"""A job's container never outlives the agent's belief that it stopped: the docker
CLI is not the container, and ``docker kill`` may fail. After a container job ends or is stopped its
container is removed by name and checked gone; one docker cannot remove keeps the attempt's GPUs and
retires the VM; a STOP for an attempt this agent does not hold removes its container; the agent's
start removes leftovers before anything that could fail. Against a stand-in docker (``fakedocker``)."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import zen
from tests.agent.fakedocker import FakeDocker
from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import wait_for
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent import leftover
from zen.agent.agent import Agent
from zen.agent.runner import JobSpec, RunningJob, container_name
from zen.core.models import ControlAction, Heartbeat
from zen.core.vm_heartbeat import VmHeartbeat

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(zen.__file__).resolve().parents[1]  # the zen package these tests import


@pytest.fixture
def docker(tmp_path, monkeypatch):
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0, raising=False)  # retries at once
    return FakeDocker(tmp_path / "docker")


def start(docker: FakeDocker, job_id: str = "gpu") -> RunningJob:
    return RunningJob.start(JobSpec(job_id=job_id, attempt=1, image="img:1", command=["train"]), local=False,
                            docker=docker.path)


def test_a_container_docker_kill_could_not_stop_is_removed_before_stop_returns(docker):
    """The reviewer's case: ``docker kill`` fails, the CLI is SIGKILLed (137), the container ran on."""
    docker.fail("kill")
    job = start(docker)
    name = container_name("gpu", 1)
    wait_for(lambda: docker.names() == [name], 10, what="the container running")
    assert job.stop(grace_s=0.3) == 137
    assert docker.names() == [] and job.container_gone is True
    assert ["kill", name] in docker.calls() and ["rm", "-f", "-v", name] in docker.calls()


def test_a_container_whose_cli_ended_first_is_removed_with_the_outcome(docker):
    docker.leaves()  # the CLI exits 0, its container left
    job = start(docker)
    assert job.outcome().exit_code == 0
    assert docker.names() == [] and job.container_gone is True


def test_a_container_docker_cannot_remove_keeps_its_gpus_and_retires_the_vm(docker, tmp_path, monkeypatch):
    monkeypatch.setattr(leftover, "WAIT_S", 2.0)  # its final report waits this long for the removal (5 min on a VM)
    monkeypatch.setattr(leftover, "RETRY_S", 0.5)
    docker.leaves()
    docker.fail("rm")
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("first", image="img:1", command=["x"]))
    transport.add_start(start_message("second", image="img:1", command=["x"]))
    settings = dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"))
    agent = Agent(IDENTITY, settings, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    confirm = confirm_claims(VM)

    def scheduler(message):
        if isinstance(message, VmHeartbeat) and message.state.value == "RETIRED":
            agent.request_shutdown("retired")
        return confirm(message)

    transport.answer = scheduler
    assert agent.run() == 0

    assert docker.names() == [container_name("first", 1)]  # still there: only deleting the VM ends it
    assert "RETIRED" in transport.vm_states()
    assert {r[0] for r in transport.job_reports()} == {"first"}  # the second was never claimed
    assert agent.slots.holds(("first", 1)) and agent.slots.full()  # its GPUs never given to another job
    assert "could not be removed" in agent.pulls.exhausted()
    [final] = [m for m in transport.published if isinstance(m, Heartbeat) and m.status.value == "SUCCEEDED"]
    assert "could not be removed within 2 s: it may still run" in (final.message or "")


def test_a_stop_for_an_attempt_not_held_here_removes_its_container_then_is_acked(docker, tmp_path):
    """After an agent crash the new agent holds nothing, but the old attempt's container may run."""
    orphan = container_name("old", 3)
    docker.add(orphan, "c-old")
    docker.add(container_name("other", 1), "c-other")
    transport = FakeTransport(VM)
    transport.order("old", 3, ControlAction.STOP)
    agent = Agent(IDENTITY, dataclasses.replace(SETTINGS, docker=docker.path), transport, local=False,
                  clock=transport.clock)
    agent._idle_wait(1.0)

    assert docker.names() == [container_name("other", 1)]
    assert ("control_ack", "old", "STOP") in transport.calls

    local = FakeDocker(tmp_path / "local")
    transport.order("old", 3, ControlAction.STOP)
    Agent(IDENTITY, dataclasses.replace(SETTINGS, docker=local.path), transport, local=True,
          clock=transport.clock)._idle_wait(1.0)
    assert local.calls() == []  # the local stack runs no containers: no docker


def agent_env(docker: FakeDocker, **env: str) -> dict[str, str]:
    kept = {key: value for key, value in os.environ.items() if not key.startswith(("ZEN_", "GCE_METADATA"))}
    return {**kept, "PYTHONPATH": os.pathsep.join([str(SHARED), str(ROOT)]), "ZEN_AGENT_DOCKER": docker.path,
            "ZEN_AGENT_NVIDIA_SMI": "/nonexistent/nvidia-smi",  # not this machine's GPUs (zen.agent.gpucheck)
            "ZEN_AGENT_METADATA_WAIT_S": "0.1", **env}  # a metadata server not answering: one try, not 90 s of them


def test_leftovers_are_removed_before_any_read_that_can_fail(docker):
    """The identity cannot be read (no metadata server): the agent exits 2, but the orphan is gone first."""
    docker.add("zen-left-0123456789ab-1", "c1")
    result = subprocess.run([sys.executable, "-m", "zen.agent"], capture_output=True, text=True, timeout=60,
                            env=agent_env(docker, GCE_METADATA_HOST="127.0.0.1:9"), cwd=ROOT)

    assert result.returncode == 2 and "agent cannot start" in result.stderr
    assert docker.names() == [] and docker.calls()[0][:4] == ["ps", "-aq", "--filter", "name=^zen-"]


def test_leftovers_that_cannot_be_removed_retire_the_vm(docker, monkeypatch):
    import zen.agent.__main__ as entry

    docker.add("zen-left-0123456789ab-1", "c1")
    docker.fail("rm")
    started = {}

    class Started:
        def __init__(self, *args, **kwargs):
            started.update(kwargs)

        def run(self):
            return 0

    for key in [key for key in os.environ if key.startswith(("ZEN_", "GCE_METADATA"))]:
        monkeypatch.delenv(key)
    for key, value in {"ZEN_VM_NAME": "vm-1", "ZEN_ZONE": "us-central1-a", "ZEN_CLUSTER": "4xa100-40gb",
                       "ZEN_PROJECT": "p", "ZEN_AGENT_LOCAL": "0", "ZEN_AGENT_DOCKER": docker.path}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(entry, "setup_logging", lambda: None)  # the test's logging stays as it is
    monkeypatch.setattr(entry, "_output_sink", lambda *args: None)
    monkeypatch.setattr(signal, "signal", lambda *args: None)
    monkeypatch.setattr("zen.agent.agent.Agent", Started)
    monkeypatch.setattr("zen.agent.transport.PubSubTransport", lambda *args: None)

    handlers = logging.getLogger("zen").handlers
    filters = {handler: list(handler.filters) for handler in handlers}
    try:
        assert entry.main([]) == 0
    finally:  # main puts the VM's fields on every line of the process: not on other tests' lines
        for handler in handlers:
            handler.filters[:] = filters[handler]

    assert docker.names() == ["zen-left-0123456789ab-1"]
    assert "could not be removed" in (started["pulls"].exhausted() or "")


def test_a_stop_under_a_shutdown_deadline_ends_by_it_even_with_a_hung_docker(docker):
    """The kill and the removal took up to ~73 s with a hung daemon (15 s kill, then 7 docker calls of
    10 s each): past systemd's grace + 15 s, the agent was SIGKILLed before its PREEMPTED report. Now
    all of it ends by ``within_s``; the container left is the next agent's to remove."""
    import time

    job = start(docker)
    wait_for(lambda: docker.names() == [container_name("gpu", 1)], 10, what="the container running")
    docker.hang("kill")
    docker.hang("ps")
    docker.hang("rm")
    began = time.monotonic()
    job.stop(grace_s=0.3, within_s=3.0)
    assert time.monotonic() - began < 6.0  # the CLI's own wait takes at least 1 s past the kill's
    assert not job.container_gone
    job.outcome()  # what the attempt does next, before its report: it removed the container again, unbounded
    assert time.monotonic() - began < 6.0


def test_a_container_docker_is_removing_counts_as_gone(docker):
    """An ``rm -f`` whose call timed out: docker goes on removing the container (a big layer takes a while), lists
    it as "removal in progress" and refuses ``rm -f`` of it; that retired a healthy VM."""
    from zen.agent.removal import remove_container

    docker.add("zen-big-1", "c1")
    docker.removing("zen-big-1")
    assert remove_container("zen-big-1", docker.path) is True


def test_a_container_whose_lease_runs_out_is_killed_by_its_supervisor_without_the_agent(docker):
    """The docker CLI ignores SIGTERM (a container stuck in shutdown) and cannot forward SIGKILL: the
    job's supervisor, alone (no ``stop`` from the agent), ``docker kill``s the container by name."""
    spec = JobSpec(job_id="gpu", attempt=1, image="img:1", command=["train"], stop_grace_s=0.3)
    job = RunningJob.start(spec, local=False, docker=docker.path, lease_s=1.0)
    name = container_name("gpu", 1)
    wait_for(lambda: docker.names() == [name], 10, what="the container running")
    wait_for(lambda: job.poll() is not None, 10, what="the supervisor's fence")
    assert ["kill", name] in docker.calls() and docker.names() == []
    assert job.fenced()


# An agent of its own starting a container job (a 60 s lease), so that the test can kill it outright.
AGENT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from zen.agent.runner import JobSpec, RunningJob
spec = JobSpec(job_id="gpu", attempt=1, image="img:1", command=["train"], stop_grace_s=0.3)
RunningJob.start(spec, local=False, docker=sys.argv[2], lease_s=60.0)
time.sleep(120)
"""


def test_a_container_job_goes_with_its_agent_killed_outright(docker):
    """The supervisor's handler of its agent's death (``launch.KILL_ALL``) SIGKILLed the job's group, for a container
    job only the docker CLI: the container ran on past the lease with no fence left, beside its rerun elsewhere."""
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(SHARED), docker.path], start_new_session=True)
    try:
        wait_for(lambda: docker.names() == [container_name("gpu", 1)], 10, what="the container running")
        agent.kill()  # the OOM killer
        agent.wait()
        wait_for(lambda: docker.names() == [], 5, what="the container killed with its agent")
    finally:
        if agent.poll() is None:
            agent.kill()
