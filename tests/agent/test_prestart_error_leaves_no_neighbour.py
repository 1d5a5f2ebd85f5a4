"""An attempt whose way to its job's start raised (an error of the agent's own, not an end it reported: the image's
pull here) kept its mark as begun in the disk watch (``DiskWatch.began``), which only its end removed. Every later
attempt on the VM then ran "beside" it: a job that filled the disk alone, with its own image or container layer, was
taken for a neighbour's victim (``DiskWatch.failed_full``): requeued free and the VM retired, VM after VM. The mark
goes with the error. A real agent (``zen.agent``, a fake transport, ``tests.agent.fakedocker``)."""

from __future__ import annotations

import dataclasses

from tests.agent.fakedocker import FakeDocker
from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent import imagepull
from zen.agent.agent import Agent

TOTAL, ROOM, FULL = 10_000_000_000, 5_000_000_000, 100_000_000  # free: room, then nearly full (under 1 GB)
ENOSPC = "OSError: [Errno 28] No space left on device"


def test_an_attempt_whose_prestart_raised_is_no_neighbour_of_later_ones(tmp_path, monkeypatch):
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0)
    real_pull, raised = imagepull.pull, []

    def pull_raising_once(*args, **kwargs):
        if not raised:
            raised.append(True)
            raise RuntimeError("the pull's own error")
        return real_pull(*args, **kwargs)

    monkeypatch.setattr(imagepull, "pull", pull_raising_once)
    docker = FakeDocker(tmp_path / "docker")
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("first", image="img:1", command=["x"]))
    transport.answer = confirm_claims(VM)
    settings = dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"))
    agent = Agent(IDENTITY, settings, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    assert agent.run() == 0
    assert raised  # the attempt's prestart raised, and the loop went on

    # A later attempt on the VM, alone: begun on a disk with room, it fails on the disk filled since.
    free = [ROOM]
    agent.disk._disk_usage = lambda path: (TOTAL, TOTAL - free[0], free[0])
    agent.disk.began(("later", 1))
    free[0] = FULL
    retired: list[str] = []
    said = agent.disk.failed_full(("later", 1), ENOSPC, retired.append)
    assert said is None and retired == [], said  # its own failure: no attempt ran beside it
