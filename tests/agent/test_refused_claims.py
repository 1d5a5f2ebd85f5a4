"""No claim storms (issue 34), the agent's side: told that its VM is being scaled down (a RELEASE whose
attribute ``refused`` is ``draining``), the agent pulls no more and says RETIRED; claims refused for
another cause make its next pull wait longer each time in a row, up to a bound; a RELEASE without a
cause (a race lost) changes nothing. The fake transport runs on a manual clock."""

from __future__ import annotations

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import make_agent, reports, start_message
from zen.agent.backoff import MOST_S, ClaimBackoff
from zen.core.models import AgentStatus, ControlAction, Heartbeat
from zen.core.vm_heartbeat import VmHeartbeat


def test_a_vm_told_it_is_being_scaled_down_claims_once_then_retires():
    transport = FakeTransport("vm-test")
    for i in range(5):
        transport.add_start(start_message(f"j{i}"))
    agent = make_agent(transport)

    def answer(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            return [transport.answer_to(message, ControlAction.RELEASE, refused="draining")]
        if isinstance(message, VmHeartbeat) and message.state.value == "RETIRED":
            agent.request_shutdown("test over")
        return []

    transport.answer = answer
    assert agent.run() == 0
    assert reports(transport) == [("j0", 1, "CLAIMED")]  # before: a claim of every start it could pull
    assert len(transport.starts) == 4  # the rest never pulled: left for VMs that stay
    assert transport.vm_states() == ["IDLE", "RETIRED", "STOPPING"]


def claims_at(transport: FakeTransport, refusals: dict[str, str | None]):
    """Answers each CLAIMED: RELEASE with the cause ``refusals`` names for its job (None: a race lost,
    no cause), CONFIRM for a job it does not name; records the manual clock at each claim."""
    at: list[float] = []

    def answer(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            at.append(transport.clock())
            if message.job_id in refusals:
                return [transport.answer_to(message, ControlAction.RELEASE, refused=refusals[message.job_id])]
            return [transport.answer_to(message, ControlAction.CONFIRM)]
        return []

    transport.answer = answer
    return at


def test_claims_refused_for_one_cause_wait_longer_each_time_until_one_is_confirmed():
    transport = FakeTransport("vm-test")
    for i in range(6):
        transport.add_start(start_message(f"j{i}"))
    at = claims_at(transport, {"j0": "no-room", "j1": "no-room", "j2": "no-room", "j3": "not-cleared"})
    assert make_agent(transport).run() == 0
    gaps = [b - a for a, b in zip(at, at[1:])]
    # Doubling for one cause; another cause starts again (j4 claimed 1 s after j3's refusal).
    assert [round(g) for g in gaps[:4]] == [1, 2, 4, 1]
    assert [r for r in reports(transport) if r[2] in ("CLAIMED", "SUCCEEDED")] == [
        (f"j{i}", 1, "CLAIMED") for i in range(5)] + [("j4", 1, "SUCCEEDED"), ("j5", 1, "CLAIMED"), ("j5", 1, "SUCCEEDED")]


def test_a_claim_lost_to_another_vm_changes_nothing():
    transport = FakeTransport("vm-test")
    for i in range(3):
        transport.add_start(start_message(f"j{i}"))
    at = claims_at(transport, {"j0": None, "j1": None, "j2": None})
    assert make_agent(transport).run() == 0
    assert len(at) == 3 and at[-1] - at[0] < 1  # pulled on at once, as before


def test_the_wait_is_bounded_and_a_confirmed_claim_ends_it():
    now = [0.0]
    backoff = ClaimBackoff(lambda: now[0])
    waits = [backoff.refused("no-room") for _ in range(10)]
    assert waits[:4] == [1, 2, 4, 8] and max(waits) == MOST_S
    assert backoff.waiting()
    now[0] += MOST_S
    assert not backoff.waiting()
    backoff.refused("no-room")
    backoff.confirmed()
    assert not backoff.waiting() and backoff.refused("no-room") == 1
