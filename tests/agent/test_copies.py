"""Copies of a start this VM already ran: a failed ack redelivers it, a narrowed start is widened,
a warm offer and its region's copy both come. Zen's reports may lag (the run's RUNNING and final
reports delayed by a retried publish), so a claim of such a copy could be confirmed and the same
attempt run twice on this VM. The agent acks and drops them, never claims them.
Against the fake transport; the real runner runs the jobs."""

from __future__ import annotations

import logging

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import one_running
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_offers import run_until_one_job_ran
from zen.core.models import AgentStatus


def statuses(transport: FakeTransport, job_id: str) -> list[str]:
    return [r[2] for r in transport.job_reports() if r[0] == job_id]


def test_a_second_copy_of_a_start_this_vm_ran_is_acked_and_never_claimed(caplog):
    transport = FakeTransport(VM, virtual_time=False)
    first, copy = transport.add_start(start_message()), transport.add_start(start_message())
    transport.add_start(start_message(attempt=2))  # a new attempt of the same job is a new run: taken
    transport.answer = confirm_claims(VM)  # Zen confirms every claim (its reports of the run still on their way)
    agent = make_agent(transport)

    with caplog.at_level(logging.INFO, logger="zen.agent"):
        assert agent.run() == 0

    assert agent.jobs_run == 2
    assert one_running(statuses(transport, "j1")) == ["CLAIMED", "RUNNING", "SUCCEEDED"] * 2
    assert [(r[1], r[2]) for r in transport.job_reports() if r[2] == "CLAIMED"] == [(1, "CLAIMED"), (2, "CLAIMED")]
    assert ("ack", first) in transport.calls and ("ack", copy) in transport.calls
    assert ("nack", copy) not in transport.calls and ("extend", copy, 10) not in transport.calls
    assert "another copy of a start this VM ran; dropped" in caplog.text


def test_the_regions_copy_of_a_start_offered_and_run_here_is_dropped():
    """Zen offered the start to this warm VM and widened it to the region meanwhile: the VM runs the
    offer, then pulls the region's copy of the same attempt."""
    transport = FakeTransport(VM, virtual_time=False)
    offered = transport.offer(start_message("warm"))
    confirm, region_copy = confirm_claims(VM), []

    def scheduler(message):
        if getattr(message, "status", None) is AgentStatus.SUCCEEDED and not region_copy:
            region_copy.append(transport.add_start(start_message("warm")))
        return confirm(message)

    transport.answer = scheduler
    agent = run_until_one_job_ran(transport)

    assert agent.jobs_run == 1
    assert one_running(statuses(transport, "warm")) == ["CLAIMED", "RUNNING", "SUCCEEDED"]
    assert ("ack", offered) in transport.calls and ("ack", region_copy[0]) in transport.calls
