"""A VM that runs several jobs at once (``max_jobs_per_vm``) shuts down while a claim of another job awaits its answer:
the claim ends there, its PREEMPTED report ("VM ... is shutting down") tells Zen to requeue the attempt should the
claim have won. When that report is not sent (Pub/Sub did not take it within its budget; kept on a disk the VM takes
with it), the VM's last word, STOPPING, names the attempt among those it gave back (``VmHeartbeat.given_back``), as it
does a claim given up unanswered: Zen requeues it at once, unspent (``zen.core.lifecycle.decide_given_back``), instead
of leaving the job ASSIGNED to a VM gone until the sweep takes it for lost and spends an attempt on it.
Real runner, fake transport."""

from __future__ import annotations

from dataclasses import replace

from tests.agent.fakes import FakeTransport
from zen.agent.transport import TransportError
from tests.agent.test_slots import IDENTITY, SETTINGS, VM, start
from zen.agent.agent import Agent
from zen.agent.slots import Capacity, Slots
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat
from zen.core.vm_heartbeat import HeldAttempt, VmHeartbeat


class ClaimsPreemptedUnsent(FakeTransport):
    """Pub/Sub does not take the PREEMPTED of the claim the shutdown cut within its budget."""

    def publish(self, message, *, budget_s, abandon=lambda: False):
        if isinstance(message, Heartbeat) and (message.job_id, message.status) == ("claiming", AgentStatus.PREEMPTED):
            raise TransportError("publish not done within its budget")
        super().publish(message, budget_s=budget_s, abandon=abandon)


def test_a_claim_the_shutdown_cut_is_given_back_in_the_vms_stopping(tmp_path):
    transport = ClaimsPreemptedUnsent(VM, virtual_time=False)
    transport.add_start(start("running", 4, "--sleep", "60"))
    transport.add_start(start("claiming", 4))
    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path)), transport, local=True,
                  slots=Slots(Capacity(gpus=8, max_jobs=2)))

    def scheduler(message):  # confirms "running"; "claiming"'s answer is still on its way when the VM is preempted
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            if message.job_id == "running":
                return [ControlMessage(vm=VM, job_id="running", attempt=1, action=ControlAction.CONFIRM, reason="won")]
            agent.request_shutdown("preempted")
        return []

    transport.answer = scheduler
    assert agent.run() == 0

    reports = {(r[0], r[2]) for r in transport.job_reports()}
    assert ("claiming", "CLAIMED") in reports and ("claiming", "PREEMPTED") not in reports  # (not sent)
    assert ("running", "PREEMPTED") in reports
    [stopping] = [m for m in transport.published if isinstance(m, VmHeartbeat) and m.state.value == "STOPPING"]
    assert HeldAttempt(job_id="claiming", attempt=1) in (stopping.given_back or []), (
        f"the VM's STOPPING gives back {stopping.given_back}")
