"""Starts offered to one VM on its control subscription (a warm cache, zen.core.routing), against a fake
transport with the real runner: an offer is claimed and run exactly as a pulled start; one the VM
cannot take now (busy, retired) is acked and dropped once, never spun on and never taken for an
order about the attempt it runs."""

from __future__ import annotations

import threading
import time

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import one_running
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent.agent import Agent
from zen.agent.limits import DailyPulls, PullLimits
from zen.core.models import AgentStatus, Heartbeat


def reports(transport: FakeTransport, job_id: str) -> list[str]:
    return [r[2] for r in transport.job_reports() if r[0] == job_id]


def run_until_one_job_ran(transport: FakeTransport) -> Agent:
    """A real agent over ``transport`` until it has run one job (at most 20 s, should it never)."""
    agent = Agent(IDENTITY, SETTINGS, transport, local=True)
    deadline = time.monotonic() + 20
    transport.when_idle = lambda: (agent.jobs_run >= 1 or time.monotonic() > deadline) and agent.request_shutdown(
        "test over")
    assert agent.run() == 0
    return agent


def test_a_start_offered_to_this_vm_is_claimed_and_run_like_a_pulled_one():
    transport = FakeTransport(VM, virtual_time=False)
    offered = transport.offer(start_message("warm"))
    transport.answer = confirm_claims(VM)
    run_until_one_job_ran(transport)

    assert one_running(reports(transport, "warm")) == ["CLAIMED", "RUNNING", "SUCCEEDED"]
    acks = [call for call in transport.calls if call[0] in ("ack", "nack", "offer_ack")]
    assert acks == [("ack", offered), ("offer_ack", offered.removeprefix("offer-"))]  # acked once, on CONFIRM
    assert [call for call in transport.calls if call[0] == "control_ack"] == [("control_ack", "warm", "CONFIRM")]


def test_an_offer_a_busy_vm_cannot_take_is_dropped_once_and_never_reaches_the_running_attempt():
    """One job at a time: while "busy" runs, a start offered for another job, and a copy of the running
    attempt's own start offered again (a republish), are each acked once and dropped: the tick's
    widening publishes the job to the start subscriptions (zen.core.routing). Neither is claimed, neither
    is taken for an order to the running attempt, and nothing comes back to be dropped again."""
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("busy", command=["python3", "-c", "import time; time.sleep(1.5)"]))
    confirm = confirm_claims(VM)
    offered: list[str] = []

    def scheduler(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING and not offered:
            offered.append(transport.offer(start_message("warm")))
            offered.append(transport.offer(start_message("busy")))
        return confirm(message)

    transport.answer = scheduler
    run_until_one_job_ran(transport)

    busy = reports(transport, "busy")
    assert busy[:2] == ["CLAIMED", "RUNNING"] and busy[-1] == "SUCCEEDED"
    assert reports(transport, "warm") == []
    dropped = [call for call in transport.calls if call[0] == "offer_ack"]
    assert dropped == [("offer_ack", ack_id.removeprefix("offer-")) for ack_id in offered]  # once each
    assert not [call for call in transport.calls if call[0] in ("ack", "nack") and call[1] in offered]


def test_a_retired_vm_drops_an_offer_and_keeps_heartbeating_retired():
    transport = FakeTransport(VM, virtual_time=False)
    agent = Agent(IDENTITY, SETTINGS, transport, local=True, pulls=DailyPulls(PullLimits(max_jobs=0), 4))
    offered = transport.offer(start_message("warm"))
    dropped = ("offer_ack", offered.removeprefix("offer-"))

    def watch():  # the retired loop reads the control subscription: over once the offer is dropped
        deadline = time.monotonic() + 10
        while dropped not in transport.calls and time.monotonic() < deadline:
            time.sleep(0.05)
        agent.request_shutdown("test over")

    threading.Thread(target=watch, daemon=True).start()
    assert agent.run() == 0
    assert transport.calls.count(dropped) == 1 and reports(transport, "warm") == []
    assert "RETIRED" in transport.vm_states()


def test_an_offer_that_came_while_the_vm_pulled_goes_before_the_start_it_pulled():
    """Review finding: the idle loop looked at offers only between pulls, so a start pulled from the
    region's subscription while an offer waited in the control stream was taken first, and the offer
    then dropped (the VM was full): its job, whose data this VM holds, waited for the widening while a
    job any VM could run took the warm VM. The pulled start is now given back to the region."""
    transport = FakeTransport(VM, virtual_time=False)
    pulled = transport.add_start(start_message("cold"))
    offered = transport.offer(start_message("warm"))
    transport.answer = confirm_claims(VM)
    run_until_one_job_ran(transport)

    assert one_running(reports(transport, "warm")) == ["CLAIMED", "RUNNING", "SUCCEEDED"]
    assert reports(transport, "cold") == []  # never claimed here: given back for another VM of the region
    assert ("nack", pulled) in transport.calls
    assert ("offer_ack", offered.removeprefix("offer-")) in transport.calls
