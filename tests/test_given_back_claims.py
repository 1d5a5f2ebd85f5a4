"""A claim the VM gave back unanswered (zen.jobs.vm_beats): the functions, through functions-framework,
against a real Postgres.

The bug these pin down: VM A claims a job; Zen's CONFIRM reaches A after it gave up waiting, gave
the start back and went on idle. The start is redelivered, VM B claims it and is told RELEASE (the job
is A's). The job waited ASSIGNED to an idle VM until the lost-job sweep, which spent an attempt. Now
A's VM heartbeat names the attempt in ``given_back`` and the job is requeued at once, as the same
attempt; but never on a heartbeat that could have been overtaken by the VM's own reports, or that
came before a claim the VM made again."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from zen.core import lifecycle
from zen.store import repository, usage

T = 1_767_225_600_000  # agents' seqs: epoch milliseconds from one counter per VM


def job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def history(zen, job_id):
    with zen.db.transaction() as session:
        return [(r["from_status"], r["to_status"], r["reason"]) for r in repository.job_history(session, job_id)]


def vm_row(zen, name):
    with zen.db.transaction() as session:
        return {vm["name"]: vm for vm in repository.list_vms(session)}.get(name)


def orders(publisher, vm, *, answers=False):
    """The orders sent to ``vm``: their actions (and with ``answers``, the seq each answers, if any)."""
    sent = [m for m in publisher.on("zen-vm-control") if m.attributes["vm"] == vm]
    if answers:
        return [(json.loads(m.data)["action"], m.attributes.get("answers")) for m in sent]
    return [json.loads(m.data)["action"] for m in sent]


def starts(publisher, job_id="job-1"):
    return [m.attributes["attempt"] for m in publisher.on("zen-job-start") if m.attributes["job_id"] == job_id]


def vm_beat(vm, seq, *given_back, state="IDLE", **extra):
    """A VM heartbeat as an agent sends it; ``given_back``: (job_id, attempt) pairs."""
    return {"kind": "vm", "vm": vm, "cluster": "4xa100-40gb", "region": "us-central1", "zone": "us-central1-a",
            "state": state, "seq": seq, "sent_at": "2026-11-23T12:00:00Z",
            "given_back": [{"job_id": j, "attempt": a} for j, a in given_back], **extra}


def test_a_claim_given_back_unanswered_is_requeued_at_once_and_runs_elsewhere_without_spending_the_attempt(
        functions, zen, publisher, clock):
    functions.submit(job_request("job-1", max_attempts=1))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))  # its CONFIRM reaches A too late
    clock.advance(60)  # A gave the start back; it is redelivered to B, which is told it is A's
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T + 60_500, vm="vm-b", zone="us-central1-b"))
    assert orders(publisher, "vm-b") == ["RELEASE"]
    assert (job(zen, "job-1").status.value, job(zen, "job-1").vm) == ("ASSIGNED", "vm-a")

    functions.heartbeat(vm_beat("vm-a", T + 60_001, ("job-1", 1)))  # A: idle, its claim given back

    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.max_attempts, record.vm, record.last_seq) == (
        "QUEUED", 1, 1, None, 0)
    *_, (before, after, reason) = history(zen, "job-1")
    assert (before, after) == ("ASSIGNED", "QUEUED") and "vm-a dropped its claim" in reason
    assert starts(publisher) == ["1", "1"]  # the same attempt, published again
    assert vm_row(zen, "vm-a")["state"] == "IDLE"

    clock.advance(5)  # B pulls the new start and claims it: it wins, runs it, and it succeeds
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T + 66_000, vm="vm-b", zone="us-central1-b"))
    assert orders(publisher, "vm-b") == ["RELEASE", "CONFIRM"]
    functions.heartbeat(heartbeat("job-1", "RUNNING", T + 66_100, vm="vm-b", zone="us-central1-b"))
    clock.advance(100)
    functions.heartbeat(heartbeat("job-1", "SUCCEEDED", T + 166_000, vm="vm-b", zone="us-central1-b",
                                  exit_code=0))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.vm) == ("SUCCEEDED", 1, "vm-b")
    with zen.db.transaction() as session:
        [used] = usage.attempts_of_job(session, "job-1")
    # From B's claim, not A's: the attempt's usage starts at the claim that ran it.
    assert (used["vm"], used["outcome"], (used["ended_at"] - used["started_at"]).total_seconds()) == (
        "vm-b", "SUCCEEDED", 100)


def test_a_late_copy_of_the_claim_the_vm_gave_back_does_not_win_the_requeued_attempt(functions, zen, publisher, clock):
    """The claim's second try, sent before the VM gave the start back, is delivered after: it won the requeued
    attempt for a VM whose agent ignores the CONFIRM (it holds no such claim), the next VM's claim was told
    RELEASE, and once the VM named it no more the sweep spent the attempt that never ran (FAILED here)."""
    functions.submit(job_request("job-1", max_attempts=1))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))  # its CONFIRM reaches A too late
    late_try = heartbeat("job-1", "CLAIMED", T + 20_000, vm="vm-a")  # the claim's second try, delayed
    clock.advance(60)
    functions.heartbeat(vm_beat("vm-a", T + 60_001, ("job-1", 1)))  # A gave it back: requeued
    functions.heartbeat(late_try)
    assert (job(zen, "job-1").status.value, job(zen, "job-1").vm) == ("QUEUED", None)

    clock.advance(1)
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T + 61_500, vm="vm-b", zone="us-central1-b"))
    assert orders(publisher, "vm-a") == ["CONFIRM"] and orders(publisher, "vm-b") == ["CONFIRM"]
    assert (job(zen, "job-1").status.value, job(zen, "job-1").vm) == ("ASSIGNED", "vm-b")
    clock.advance(1)  # A claims it again, after it gave it back: a new claim, told it is B's
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T + 62_600, vm="vm-a"))
    assert orders(publisher, "vm-a") == ["CONFIRM", "RELEASE"]


def test_a_losing_claim_delivered_again_after_the_winner_gave_the_attempt_back_does_not_win_it(
        functions, zen, publisher, clock):
    """B's claim lost to A's (told RELEASE, B dropped its copy of the start); A gave the attempt back. The same
    claim delivered again (Pub/Sub may redeliver a message; a dead letter may be published again) won the
    requeued attempt for B, whose agent holds no such claim: ASSIGNED until the sweep spent the attempt (FAILED
    here, never having run). A claim of B's sent after that is a new one and may win."""
    functions.submit(job_request("job-1", max_attempts=1))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))
    clock.advance(60)
    losing = heartbeat("job-1", "CLAIMED", T + 60_500, vm="vm-b", zone="us-central1-b")
    functions.heartbeat(losing)
    assert orders(publisher, "vm-b") == ["RELEASE"]
    functions.heartbeat(vm_beat("vm-a", T + 60_001, ("job-1", 1)))  # A gave it back: requeued
    assert (job(zen, "job-1").status.value, job(zen, "job-1").vm) == ("QUEUED", None)
    functions.heartbeat(losing)  # delivered again
    assert (job(zen, "job-1").status.value, job(zen, "job-1").vm) == ("QUEUED", None)
    assert orders(publisher, "vm-b") == ["RELEASE"]
    clock.advance(5)
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T + 66_000, vm="vm-b", zone="us-central1-b"))  # a new claim
    assert (job(zen, "job-1").status.value, job(zen, "job-1").vm) == ("ASSIGNED", "vm-b")


def test_a_refused_claim_delivered_again_once_its_cause_is_gone_does_not_win_the_attempt(functions, zen, clock):
    """B's claim refused (its VM being scaled down), its start dropped; the drain undone (its instance gone and
    back): the same refused claim delivered again won the attempt for a VM holding no such claim."""
    with zen.db.transaction() as session:
        session.sql("INSERT INTO vm_drains (name, cluster, region, at) VALUES ('vm-b', '4xa100-40gb', 'us-central1', :at)",
                    at=clock())
    functions.submit(job_request("job-1", max_attempts=1))
    refused = heartbeat("job-1", "CLAIMED", T, vm="vm-b", zone="us-central1-b")
    functions.heartbeat(refused)
    assert job(zen, "job-1").status.value == "QUEUED"
    with zen.db.transaction() as session:
        session.sql("DELETE FROM vm_drains WHERE name = 'vm-b'")
    functions.heartbeat(refused)  # delivered again
    assert (job(zen, "job-1").status.value, job(zen, "job-1").vm) == ("QUEUED", None)


def test_an_older_agent_counting_from_1_per_claim_still_wins_once_a_refusals_cause_is_gone(functions, zen, clock):
    """Older agents count a claim's seq from 1 (docs/reference/messages.md): a refusal's floor would ignore every
    later claim of theirs for good. Only epoch-millisecond seqs set one (zen.core.reports.refused_floor)."""
    with zen.db.transaction() as session:
        session.sql("INSERT INTO vm_drains (name, cluster, region, at) VALUES ('vm-b', '4xa100-40gb', 'us-central1', :at)",
                    at=clock())
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 3, vm="vm-b", zone="us-central1-b"))  # a claim's third try
    assert job(zen, "job-1").status.value == "QUEUED" and not job(zen, "job-1").left_vms
    with zen.db.transaction() as session:
        session.sql("DELETE FROM vm_drains WHERE name = 'vm-b'")
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-b", zone="us-central1-b"))  # its next claim
    assert (job(zen, "job-1").status.value, job(zen, "job-1").vm) == ("ASSIGNED", "vm-b")


def test_an_idle_heartbeat_that_overtakes_the_reports_of_the_job_the_vm_ran_changes_nothing(
        functions, zen, publisher):
    """A short job: A claimed it, got CONFIRM in time, ran it, reported RUNNING and SUCCEEDED, then
    sent an IDLE VM heartbeat, which arrives first. A never gave it back, so the heartbeat names it
    not; what it names (an attempt of another job, now B's) changes nothing either."""
    functions.submit(job_request("job-0"))
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-0", "CLAIMED", T - 90_000, vm="vm-a"))  # given back, then won by B
    functions.heartbeat(vm_beat("vm-a", T - 20_000, ("job-0", 1)))
    functions.heartbeat(heartbeat("job-0", "CLAIMED", T - 10_000, vm="vm-b", zone="us-central1-b"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))
    held, steps = job(zen, "job-1"), history(zen, "job-1")

    functions.heartbeat(vm_beat("vm-a", T + 5_000, ("job-0", 1)))  # before RUNNING T+100, SUCCEEDED T+4900

    assert (job(zen, "job-1").status, job(zen, "job-1").vm, job(zen, "job-1").last_seq) == (held.status, "vm-a", T)
    assert history(zen, "job-1") == steps and starts(publisher) == ["1"]
    assert (job(zen, "job-0").status.value, job(zen, "job-0").vm) == ("ASSIGNED", "vm-b")
    assert (vm_row(zen, "vm-a")["state"], vm_row(zen, "vm-a")["last_seq"]) == ("IDLE", T + 5_000)

    functions.heartbeat(heartbeat("job-1", "RUNNING", T + 100, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "SUCCEEDED", T + 4_900, vm="vm-a", exit_code=0))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.exit_code) == ("SUCCEEDED", 1, 0)
    assert [(a, b) for a, b, _ in history(zen, "job-1")][2:] == [
        ("QUEUED", "ASSIGNED"), ("ASSIGNED", "RUNNING"), ("RUNNING", "SUCCEEDED")]
    assert starts(publisher) == ["1"]


def test_a_heartbeat_sent_before_the_vm_claimed_the_attempt_again_changes_nothing(functions, zen, publisher):
    """A gave the start back (its heartbeat says so), then pulled it again and claimed it anew: that
    CLAIMED, later than the heartbeat, is answered first. The heartbeat, delivered after, must not
    requeue the job A is now about to run."""
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))  # answered too late
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T + 61_000, vm="vm-a"))  # the claim made again
    assert orders(publisher, "vm-a") == ["CONFIRM", "CONFIRM"]

    functions.heartbeat(vm_beat("vm-a", T + 60_001, ("job-1", 1)))  # sent between the two claims

    record = job(zen, "job-1")
    assert (record.status.value, record.vm, record.last_seq) == ("ASSIGNED", "vm-a", T + 61_000)
    assert starts(publisher) == ["1"] and vm_row(zen, "vm-a")["last_seq"] == T + 60_001
    functions.heartbeat(heartbeat("job-1", "RUNNING", T + 61_100, vm="vm-a"))
    assert job(zen, "job-1").status.value == "RUNNING"


def test_a_running_job_its_vm_names_as_given_back_is_left_to_the_sweep(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", T + 100, vm="vm-a"))
    functions.heartbeat(vm_beat("vm-a", T + 90_000, ("job-1", 1), ("job-1", 2), ("no-such-job", 1)))
    record = job(zen, "job-1")
    assert (record.status.value, record.vm, record.attempt) == ("RUNNING", "vm-a", 1)
    assert starts(publisher) == ["1"] and vm_row(zen, "vm-a") is not None


def test_a_malformed_given_back_is_rejected_with_the_reason_and_acked(functions, zen):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))
    functions.heartbeat(vm_beat("vm-a", T + 90_000, given_back=[{"job_id": "job-1", "attempt": "1"}]))
    functions.heartbeat(vm_beat("vm-a", T + 90_001, *[(f"j{i}", 1) for i in range(17)]))
    with zen.db.transaction() as session:
        reasons = [r["reason"] for r in repository.list_rejections(session)]
    assert len(reasons) == 2
    assert "given_back.0.attempt" in reasons[0] and "integer" in reasons[0]
    assert "given_back" in reasons[1] and "16" in reasons[1]
    assert job(zen, "job-1").status.value == "ASSIGNED" and vm_row(zen, "vm-a") is None


def test_orders_that_answer_a_report_carry_its_seq_and_others_do_not(functions, zen, publisher):
    """What lets an agent that claims an attempt again take only the answers to its new claim."""
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T + 3, vm="vm-b", zone="us-central1-b"))
    functions.stop({"job_id": "job-1", "reason": "changed my mind"})  # no report to answer
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T + 7, vm="vm-a"))
    assert orders(publisher, "vm-a", answers=True) == [("CONFIRM", str(T)), ("STOP", None), ("STOP", str(T + 7))]
    assert orders(publisher, "vm-b", answers=True) == [("RELEASE", str(T + 3))]


def test_a_stopped_claim_its_vm_gave_back_ends_at_once(functions, zen, publisher, clock):
    """Stopped while its claim's answer was on its way, then given back: it waited stop_timeout_s for an answer
    no VM would send (the VM ignores a STOP of what it does not hold), and billed that wait."""
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))  # its CONFIRM reaches A too late
    functions.stop({"job_id": "job-1", "reason": "not needed"})
    assert job(zen, "job-1").status.value == "STOPPING"
    clock.advance(60)
    functions.heartbeat(vm_beat("vm-a", T + 60_001, ("job-1", 1)))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt) == ("CANCELLED", 1)
    *_, (before, after, reason) = history(zen, "job-1")
    assert (before, after) == ("STOPPING", "CANCELLED") and reason.startswith("not needed; vm-a dropped its claim")
    with zen.db.transaction() as session:
        [used] = usage.attempts_of_job(session, "job-1")
    assert (used["outcome"], (used["ended_at"] - used["started_at"]).total_seconds()) == ("STOPPED", 60)


def test_a_claim_its_queue_took_back_and_its_vm_gave_back_is_rerun_at_once(functions, zen, clock):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", T, vm="vm-a"))
    with zen.jobs._store.transaction() as tx:
        current = tx.get_job("job-1", lock=True)
        zen.jobs.decisions.apply(tx, current, lifecycle.decide_preempt(current, "queue prod needs its quota", clock()),
                                 actor="admission", now=clock(), admit=False)
    clock.advance(60)
    functions.heartbeat(vm_beat("vm-a", T + 60_001, ("job-1", 1)))  # waited preempted_stop_s before
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.max_attempts) == ("PENDING", 2, 4)  # unspent
    functions.tick()  # (no queues here: the tick admits it)
    assert job(zen, "job-1").status.value == "QUEUED"
