"""A host maintenance's notice that comes before an attempt's job started: a claim awaiting its answer, a gang's node
awaiting the others, an attempt confirmed still pulling its image. The notice stopped new pulls only, so such an
attempt went on to start its job on a VM GCE stops within the hour: up to an hour of its GPUs' time lost, then its
rerun elsewhere (for a gang's node, the whole gang's attempt on every node). It is given back before its job starts
now (PREEMPTED in words of the host maintenance: Zen requeues it, no attempt spent), unless its ``max_runtime_s``
surely ends it before GCE's stop (``zen.agent.shutdown.Shutdown.before_start``).

The gang through the real functions, a ``python -m zen.agent`` watching the Compute stand-in's metadata for its VM
and two more agents; the others a real agent on a fake transport (``tests.agent.fakedocker`` for the pull), the
watcher's call (``zen.agent.__main__._maintenance``) made as Zen's answer or the pull's heartbeat goes out."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from tests.agent.test_container_ends_named import IMAGE
from tests.agent.test_gang_claims import RANKS
from tests.agent.test_stop_before_start import SECRET
from tests.agent.test_maintenance_cut_words import confirmed_and_at_the_pull, told
from tests.agent.test_maintenance_notice import cloud  # noqa: F401 (its fixture: a standard MIG's stand-in)
from tests.agent.test_upload_end import finals
from tests.local.test_compute_standin import BOOT_S
from tests.waiting import wait_for
from zen.agent.__main__ import _maintenance
from zen.agent.agent import Agent
from zen.core.models import AgentStatus, Heartbeat

NOTICE = "metadata server reports a host maintenance: GCE stops this VM within the hour"
BEFORE = "is stopping for host maintenance before its job started"


def test_a_gang_node_waiting_at_the_notice_leaves_the_gang_and_its_part_runs_elsewhere(
        scheduler, agents, cloud, tmp_path):  # noqa: F811
    cloud, mig = cloud
    cloud.resize(1, mig=mig)
    cloud.advance(BOOT_S + 1)
    (inst,) = cloud.instances(mig=mig)
    first = agents.start(inst.name, ZEN_PREEMPTION_METADATA_HOST=f"{cloud.standin.endpoint}/zen-local/vms/{inst.name}")
    scheduler.submit("pair", [sys.executable, "-c", RANKS], nodes=2)
    wait_for(lambda: (job := scheduler.job("pair")) is not None and job.gang, 45, what=f"{inst.name} in the gang")
    budget = scheduler.job("pair").max_attempts

    cloud.maintenance(inst)  # the agent's long poll answers at once
    wait_for(lambda: first.said(NOTICE), 30, what="the notice heard")
    job = wait_for(lambda: (j := scheduler.job("pair")) is not None and not j.gang and j, 30,
                   what=f"{inst.name} out of the gang it waited for")
    assert (job.status.value, job.attempt, job.max_attempts) == ("QUEUED", 1, budget), scheduler.history("pair")

    others = agents.start("vm-b"), agents.start("vm-c")
    job = scheduler.wait_status("pair", "SUCCEEDED", "FAILED", "LOST", timeout_s=60)
    assert (job.status.value, job.attempt) == ("SUCCEEDED", 1), (job.message, scheduler.history("pair"))
    assert {node.vm for node in job.gang} == {"vm-b", "vm-c"}
    assert all(agent.said("job ended", job_id="pair") for agent in others)
    assert not first.said("job started", job_id="pair")  # never on the VM GCE stops within the hour


class RetiredEnds(FakeTransport):
    """Shuts the agent down once it says RETIRED (the notice's, once its attempt is over)."""

    agent: Agent | None = None

    def next_control(self, timeout_s: float):
        if "RETIRED" in self.vm_states() and self.agent is not None:
            self.agent.request_shutdown("test over")
        return super().next_control(timeout_s)


def noticed_as_claimed(transport: RetiredEnds, **fields) -> Agent:
    """An agent whose claim of one start is confirmed, the notice coming as that answer goes out."""
    transport.add_start(start_message("j1", command=[sys.executable, "-c", "print('ran')"], **fields))
    agent = transport.agent = Agent(IDENTITY, SETTINGS, transport, local=True, clock=transport.clock)
    confirm = confirm_claims(VM)

    def zen(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            _maintenance(agent)
        return confirm(message)

    transport.answer = zen
    return agent


@pytest.mark.parametrize("fields", [{}, {"max_runtime_s": 3550}, {"max_runtime_s": 1800, "outputs": "gs://out-bkt/r"}],
                         ids=["no-limit", "past-the-hour", "its-upload-past-the-hour"])
def test_a_claim_answered_after_the_notice_is_given_back_not_run(fields):
    transport = RetiredEnds(VM)
    agent = noticed_as_claimed(transport, **fields)  # its job (or its outputs' upload) may end past GCE's stop
    assert agent.run() == 0 and agent.jobs_run == 0
    final = finals(transport)["j1"]
    assert final.status is AgentStatus.PREEMPTED, final.message
    assert told(final.message) == (BEFORE, "was requeued"), final.message
    assert transport.vm_states()[-2:] == ["RETIRED", "STOPPING"]


def test_a_job_whose_max_runtime_s_ends_it_within_the_notice_still_runs():
    transport = RetiredEnds(VM)
    agent = noticed_as_claimed(transport, max_runtime_s=600)
    assert agent.run() == 0 and agent.jobs_run == 1
    final = finals(transport)["j1"]
    assert final.status is AgentStatus.SUCCEEDED and "ran" in (final.message or ""), final.message


def test_a_notice_as_the_confirmed_attempt_begins_reads_nor_stages_anything():
    transport, read = RetiredEnds(VM), list[str]()
    transport.add_start(start_message("j1", secrets={"TOKEN": SECRET}))
    agent = transport.agent = Agent(IDENTITY, SETTINGS, transport, local=True, clock=transport.clock,
                                    read_secret=lambda reference: read.append(reference) or b"value")
    confirm = confirm_claims(VM)

    def zen(message):  # the VM's BUSY, as its attempt begins (its claim confirmed)
        if not isinstance(message, Heartbeat) and message.state.value == "BUSY":
            _maintenance(agent)
        return confirm(message)

    transport.answer = zen
    assert agent.run() == 0
    final = finals(transport)["j1"]
    assert (final.status, told(final.message)) == (AgentStatus.PREEMPTED, (BEFORE, "was requeued")), final.message
    assert read == []  # its secrets never read: nothing of it done on the VM GCE stops


def test_a_notice_while_the_confirmed_attempt_pulls_its_image_gives_it_back_before_its_start(tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.pulls(lines=3, every_s=0.1)  # pulled, the notice come meanwhile
    docker.ends(0)  # (run, its job would end at once)
    transport = RetiredEnds(VM, virtual_time=False)
    transport.add_start(start_message("pull", image=IMAGE, command=["python", "train.py"]))
    settings = dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"))
    agent = transport.agent = Agent(IDENTITY, settings, transport, local=False)
    transport.answer = confirmed_and_at_the_pull(lambda: _maintenance(agent))
    agent.run()

    final = finals(transport)["pull"]
    assert final.status is AgentStatus.PREEMPTED, final.message
    assert told(final.message) == (BEFORE, "was requeued"), final.message
    assert [call[0] for call in docker.calls()].count("pull") == 1  # the pull went on to its end
    assert not [call for call in docker.calls() if call[0] == "run"]  # its command never ran
