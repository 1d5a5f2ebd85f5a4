"""An agent that hangs (SIGSTOP, starved) while it waits for the answer to its CLAIMED, and resumes after Zen
took the claimed attempt for lost and reran it elsewhere, must not run the attempt on the CONFIRM that Zen
sent to its first CLAIMED before the hang.

The order of things, as Zen and Pub/Sub do them:
- t=0   the agent claims attempt 1 (CLAIMED seq s1, accepted by Pub/Sub); Zen: ASSIGNED to this VM, CONFIRM
        (attribute ``answers`` = s1) published to the VM's control subscription;
- the agent is stopped (SIGSTOP) before it reads the CONFIRM, for 300 s;
- t=120 Zen's sweep: ASSIGNED and silent past heartbeat_timeout_s: LOST, requeued as attempt 2 (which another
        VM claims and runs), STOP(attempt 1) published to this VM;
- t=300 the agent resumes: its claim's try is over, it sends CLAIMED again (s2, accepted: the fence's lease
        starts afresh), then reads the CONFIRM answering s1 (s1 >= its first seq: taken as this claim's) and
        RUNS attempt 1 beside attempt 2.

The CONFIRM answers a CLAIMED sent 300 s ago, far beyond the fence (Zen's deadline counts from when it heard
that claim): the lease it would grant is over, and the agent must not start the job (the docs: "a job does
not run twice ... nor when its agent hangs").
"""

from __future__ import annotations

from tests.agent.fakes import FakeTransport
from tests.agent.helpers import job_command
from tests.agent.test_agent_loop import VM, make_agent, start_message
from zen.agent.settings import AgentSettings
from zen.agent.transport import ControlDelivery
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat

HANG_S = 300.0


class HungInClaim(FakeTransport):
    """Zen heard the first CLAIMED at once and confirmed it; the agent then hangs for ``HANG_S`` on its
    agent clock before its next look at the control subscription, during which Zen's sweep took the attempt
    for lost (attempt 2 is queued); Zen's STOPs for attempt 1 come once the command is up."""

    def __init__(self, pidfile):
        super().__init__(VM)
        self.pidfile = pidfile
        self.first: Heartbeat | None = None
        self.hung = False

    def next_control(self, timeout_s):
        if self.first is not None and not self.hung:
            self.hung = True
            self.clock.now += HANG_S  # SIGSTOP: nothing runs on the VM meanwhile
            confirm = ControlMessage(vm=VM, job_id=self.first.job_id, attempt=self.first.attempt,
                                     action=ControlAction.CONFIRM, reason="claim won")
            self.controls.append(ControlDelivery("c-confirm", confirm.to_bytes(),
                                                 {"vm": VM, "answers": str(self.first.seq)}, lambda: None))
            return None
        return super().next_control(timeout_s)

    def publish(self, message, *, budget_s, **abandon):
        super().publish(message, budget_s=budget_s)
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED and self.first is None:
            self.first = message
        if (isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING and self.hung
                and self.pidfile.exists()):
            # Zen, at attempt 2 by now: a RUNNING of attempt 1 is stale and answered STOP (the sweep's own STOP
            # of attempt 1 may come before or after the CONFIRM: Pub/Sub does not order them). Held here until the
            # command is up, to show what ran.
            self.controls.append(ControlMessage(vm=VM, job_id=message.job_id, attempt=message.attempt,
                                                action=ControlAction.STOP, reason="stale attempt 1"))


def test_a_confirm_read_after_the_agent_hung_past_its_lease_does_not_start_the_job(tmp_path):
    pidfile = tmp_path / "pid"
    transport = HungInClaim(pidfile)
    transport.add_start(start_message(command=job_command("--pidfile", str(pidfile), "--sleep", "5")))
    settings = AgentSettings(heartbeat_s=5, stop_grace_s=1, poll_s=0.05, claim_timeout_s=20, claim_tries=3,
                             lease_s=10, vm_heartbeat_s=1000, work_dir=str(tmp_path / "work"))
    agent = make_agent(transport, settings)
    fence_s = 120 - 1 - 15  # heartbeat_timeout_s - stop_grace_s - margin: Zen's deadline is long gone
    assert HANG_S > fence_s + settings.stop_grace_s + 15

    agent.run()

    every = [m.status.value for m in transport.published if isinstance(m, Heartbeat)]
    statuses = [s for i, s in enumerate(every) if not i or s != every[i - 1] or s == "CLAIMED"]
    # The agent ran attempt 1 (BUSY, RUNNING, its command started) until Zen's answer to its RUNNING stopped it.
    assert not pidfile.exists() and "RUNNING" not in statuses and agent.jobs_run == 0, (
        f"attempt 1 was run {HANG_S:.0f} s after the claim its CONFIRM answered (reports: {statuses}; "
        f"its command started: {pidfile.exists()})")
    assert statuses[-1] == "PREEMPTED", statuses  # given back: Zen requeues it, or has already
