"""A gang's reports in the order Pub/Sub may bring them (at least once, unordered), through the four functions
against a real Postgres (zen.core.gang): a node that left stays out, an older report does not undo a newer
claim, a node that started its part is never confirmed again, and a retry never runs beside a node of the
failed attempt."""

from __future__ import annotations

from tests.messages import job_request
from tests.test_functions_lifecycle import controls, job
from tests.test_gang_lifecycle import actions, beat, claim
from tests.test_given_back_claims import T, vm_beat


def test_a_late_copy_of_a_departed_nodes_claim_does_not_put_it_back_in_the_gang(functions, zen, publisher, clock):
    """vm-1 claims, repeats its claim, and is preempted while the gang assembles: it leaves. A copy of its
    repeated claim delivered after that must not make it a member: the gang would be confirmed to a VM that
    is gone, run a node short, and its silence spend the attempt (FAILED for good with one attempt)."""
    functions.submit(job_request("g", nodes=2, max_attempts=1))
    claim(functions, "vm-1", seq=1)
    claim(functions, "vm-1", seq=2)
    beat(functions, "vm-1", "PREEMPTED", 3)
    assert job(zen, "g").gang is None
    claim(functions, "vm-1", seq=2)  # delivered again, after the PREEMPTED
    assert job(zen, "g").gang is None
    claim(functions, "vm-2")
    record = job(zen, "g")
    assert record.status.value == "QUEUED" and [n.vm for n in record.gang] == ["vm-2"]
    assert "CONFIRM" not in actions(publisher, "vm-2")
    claim(functions, "vm-1", seq=4)  # a claim sent after it left (its VM came back): it joins
    assert job(zen, "g").status.value == "ASSIGNED"


def test_a_given_back_report_older_than_the_nodes_next_claim_leaves_the_gang_whole(functions, zen, publisher):
    """vm-1 gives its part back (its VM heartbeat at T+100), then claims the same start again (T+200); the
    claim comes first, the gang completes, and the older heartbeat comes last: nothing changes."""
    functions.submit(job_request("g", nodes=2))
    claim(functions, "vm-1", seq=T)
    claim(functions, "vm-1", seq=T + 200)
    claim(functions, "vm-2", seq=T + 5)
    assert job(zen, "g").status.value == "ASSIGNED"
    functions.heartbeat(vm_beat("vm-1", T + 100, ("g", 1)))
    record = job(zen, "g")
    assert (record.status.value, record.attempt) == ("ASSIGNED", 1)
    assert actions(publisher, "vm-2") == ["CONFIRM"]


def test_a_node_that_started_its_part_is_not_confirmed_again(functions, zen, publisher):
    """A node whose part ended (or runs) claims the same attempt again (a restarted agent, a spare copy of the
    start): it is told nothing, and its part does not run a second time."""
    functions.submit(job_request("g", nodes=2))
    claim(functions, "vm-1")
    claim(functions, "vm-2")
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    beat(functions, "vm-1", "SUCCEEDED", 3, exit_code=0)
    claim(functions, "vm-1", seq=50)
    claim(functions, "vm-2", seq=51)  # still running its part
    record = job(zen, "g")
    assert [n.status for n in record.gang] == ["SUCCEEDED", "RUNNING"]
    assert actions(publisher, "vm-1") == ["CONFIRM"] and actions(publisher, "vm-2") == ["CONFIRM"]
    claim(functions, "vm-2", seq=1)  # its first claim again (its CONFIRM lost once): the same answer as then
    assert actions(publisher, "vm-2") == ["CONFIRM"]


def test_a_retried_failure_waits_for_the_other_nodes_before_the_next_attempt(functions, zen, publisher, clock):
    """A node fails with a retry left while another still runs: the job stops that one first (STOPPING); the
    next attempt is neither queued nor confirmed beside it, and a PREEMPTED among the others makes the loss a
    preemption, which spends no retry."""
    functions.submit(job_request("g", nodes=2, max_retries=1, retry_backoff_s=0))
    claim(functions, "vm-1")
    claim(functions, "vm-2")
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    beat(functions, "vm-2", "FAILED", 3, exit_code=1)
    clock.advance(1)
    functions.tick()
    assert (job(zen, "g").status.value, job(zen, "g").attempt) == ("STOPPING", 1)
    claim(functions, "vm-3", attempt=2)
    assert not [c for c in controls(publisher) if c["action"] == "CONFIRM" and c["attempt"] == 2]
    beat(functions, "vm-1", "PREEMPTED", 4)  # the failure was its loss's
    record = job(zen, "g")
    assert (record.attempt, record.retries, record.preemptions) == (2, 0, 1)
    assert record.status.value in ("PENDING", "QUEUED")
