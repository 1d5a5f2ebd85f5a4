"""A preemption notice that comes while a RUNNING heartbeat waits for Pub/Sub: the job's SIGTERM went
only once that publish gave up (its budget, up to 10 s of the ~30 s GCE gives a spot VM), cutting the
job's time to checkpoint. The publish now gives up as the VM shuts down. The real AttemptRunner and a
real job process; Pub/Sub is a fake transport that never answers that heartbeat."""

from __future__ import annotations

import sys
import threading
import time

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_upload_end import finals, settings
from zen.agent.transport import TransportError
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat

HEARTBEAT_S = 3.0  # the RUNNING heartbeat's budget: min(10 s, this)

# Sleeps; at SIGTERM writes when it came and exits 0.
JOB = ("import os, signal, sys, time\n"
       "def term(*_):\n"
       "    open(os.environ['TERM_FILE'], 'w').write(repr(time.time())); sys.exit(0)\n"
       "signal.signal(signal.SIGTERM, term)\n"
       "open(os.environ['READY_FILE'], 'w').close()\n"
       "time.sleep(60)\n")


class SilentOnSecondBeat(FakeTransport):
    """Answers everything but the second RUNNING heartbeat, which waits, as for a Pub/Sub that does not
    answer, until its budget is spent or the agent gives it up."""

    def __init__(self) -> None:
        super().__init__(VM, virtual_time=False)
        self.running = 0
        self.waiting = threading.Event()

    def publish(self, message, *, budget_s, abandon=lambda: False):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING:
            self.running += 1
            if self.running == 2:
                self.waiting.set()
                until = time.monotonic() + budget_s
                while time.monotonic() < until:
                    if abandon():
                        raise TransportError("publish a heartbeat: abandoned")
                    time.sleep(0.02)
                raise TransportError("publish a heartbeat: no answer within its budget")
        super().publish(message, budget_s=budget_s)


def test_a_preemption_notice_during_a_slow_heartbeat_reaches_the_job_at_once(tmp_path):
    transport = SilentOnSecondBeat()
    transport.answer = lambda m: [ControlMessage(vm=VM, job_id="nb", attempt=1, action=ControlAction.CONFIRM,
                                                 reason="won")] if (
        isinstance(m, Heartbeat) and m.status is AgentStatus.CLAIMED) else []
    term_file, ready = tmp_path / "term", tmp_path / "ready"
    transport.add_start(start_message("nb", command=[sys.executable, "-c", JOB],
                                      env={"TERM_FILE": str(term_file), "READY_FILE": str(ready)}))
    agent = make_agent(transport, settings(tmp_path, heartbeat_s=HEARTBEAT_S, stop_grace_s=5, lease_s=60))
    noticed: list[float] = []

    def preempt() -> None:
        if transport.waiting.wait(timeout=30) and ready.exists():
            noticed.append(time.time())
            agent.request_shutdown("preempted")

    notice = threading.Thread(target=preempt)
    notice.start()
    agent.run()
    notice.join(timeout=30)

    assert noticed, "the second RUNNING heartbeat never went"
    assert finals(transport)["nb"].status is AgentStatus.PREEMPTED
    assert float(term_file.read_text()) - noticed[0] < 1.5  # not the heartbeat's 3 s budget later
