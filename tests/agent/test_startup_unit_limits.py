"""The agent's unit against a hung docker daemon and against an agent that fails at every start: the startup script's
unit (dry run), and its removal of leftover containers run as systemd runs it, against a stand-in docker."""

from __future__ import annotations

import inspect
import os
import re
import signal
import subprocess
import time

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_startup_script import metadata, run_script  # noqa: F401 - the fixture
from zen.agent.transport import PubSubTransport


def _unit(metadata, tmp_path) -> str:  # noqa: F811
    assert run_script(metadata, tmp_path).returncode == 0
    return (tmp_path / "etc/systemd/system/zen-agent.service").read_text()


def test_the_units_removal_of_leftover_containers_ends_while_docker_hangs(metadata, tmp_path):  # noqa: F811
    """A hung daemon never answers ``docker ps``: unbounded, the removal before the agent waited out the start's
    timeout (90 s), systemd restarted the unit, and the agent, whose own removal retires the VM (or powers it off),
    never ran while a container an earlier agent left ran on."""
    sweep = re.search(r"^ExecStartPre=-/bin/sh -c '(.*)'$", _unit(metadata, tmp_path / "root"), re.M)
    assert sweep is not None
    bounds = re.findall(r"timeout (\d+) docker", sweep[1])
    assert len(bounds) == 2 and all(int(b) <= 60 for b in bounds), sweep[1]  # each docker call, within the start's 90 s
    command = re.sub(r"timeout \d+ docker", "timeout 1 docker", sweep[1])  # run with the bounds shortened
    docker = FakeDocker(tmp_path / "docker")
    docker.add("zen-train-0123456789ab-3", "c3")
    docker.hang("ps")
    began = time.monotonic()
    sweeping = subprocess.Popen(["/bin/sh", "-c", command], start_new_session=True, stdout=subprocess.DEVNULL,
                                env={**os.environ, "PATH": f"{docker.root}:{os.environ['PATH']}"})
    try:
        sweeping.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if sweeping.poll() is None:
            os.killpg(sweeping.pid, signal.SIGKILL)
            sweeping.wait()
    assert time.monotonic() - began < 15, "the removal before the agent starts waits for a hung docker for ever"
    assert ["ps", "-aq", "--filter", "name=^zen-"] == docker.calls()[0]


def test_an_agent_that_fails_at_every_start_is_started_no_more(metadata, tmp_path):  # noqa: F811
    """Restart=on-failure with no start limit (systemd's default, 5 starts in 10 s, never reached 5 s apart) restarted
    an agent that fails at every start for ever: each start said IDLE and could claim a job, which was then lost,
    job after job. The start limit stops it; an agent that fails only after the control subscription's budget
    (Pub/Sub unreachable at start, exit 1) never reaches it. Nothing powers the VM off (its MIG would recreate it,
    and the new VM fail the same way): the agent falls silent and Zen deletes the VM."""
    unit = _unit(metadata, tmp_path)
    head = unit.split("[Service]")[0]
    interval = re.search(r"^StartLimitIntervalSec=(\d+)$", head, re.M)
    burst = re.search(r"^StartLimitBurst=(\d+)$", head, re.M)
    assert interval is not None and burst is not None, "no start limit: an agent failing at every start runs for ever"
    restart_s = int(re.search(r"^RestartSec=(\d+)$", unit, re.M)[1])

    def starts_within_limit(apart_s: float) -> int:  # starts 0, apart_s, ... counted in one limit window
        return int(int(interval[1]) // apart_s) + 1

    assert starts_within_limit(restart_s + 10) > int(burst[1])  # a start that fails within seconds: stopped
    budget_s = inspect.signature(PubSubTransport.open_control).parameters["budget_s"].default
    assert starts_within_limit(restart_s + budget_s) <= int(burst[1])  # Pub/Sub unreachable a while: restarted
    assert "FailureAction" not in unit and "OnFailure" not in unit
