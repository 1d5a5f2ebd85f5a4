"""A host maintenance's notice that comes while the loop pulls (an idle agent spends most of its time in the pull's
long poll): the start the pull brings is given back, not claimed. Claimed, it ran on a VM GCE stops within the hour,
and was cut there (up to an hour of GPU time lost, the job rerun), while the VM said BUSY, not RETIRED, all along.
A real agent, a fake transport, the watcher's call (``zen.agent.__main__._maintenance``) made inside the pull."""

from __future__ import annotations

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import VM, make_agent, start_message
from zen.agent.__main__ import _maintenance
from zen.agent.transport import StartDelivery


class NoticeInPull(FakeTransport):
    """The metadata server's notice is read while the pull waits; the pull then brings a start."""

    def __init__(self) -> None:
        super().__init__(VM)
        self.agent = None

    def pull_start(self) -> StartDelivery | None:
        if self.starts and self.agent is not None:
            _maintenance(self.agent)  # the watcher's thread, as the pull's long poll waits
        return super().pull_start()

    def next_control(self, timeout_s: float):
        if "RETIRED" in self.vm_states() and self.agent is not None:
            self.agent.request_shutdown("test over")
        return super().next_control(timeout_s)


def test_a_start_pulled_as_the_maintenance_notice_came_is_given_back_not_claimed():
    transport = NoticeInPull()
    transport.answer = confirm_claims(VM)
    ack_id = transport.add_start(start_message())
    agent = transport.agent = make_agent(transport)
    assert agent.run() == 0
    assert transport.job_reports() == []  # no CLAIMED: nothing runs on the VM GCE stops within the hour
    assert ("nack", ack_id) in transport.calls  # given back at once, for another VM
    assert transport.vm_states()[-2:] == ["RETIRED", "STOPPING"]
