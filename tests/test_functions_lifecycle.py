"""The four functions, invoked through functions-framework with Eventarc envelopes, against a real
Postgres: the job lifecycle and its delivery guarantees."""

from __future__ import annotations

import json

import pytest

from tests.messages import agent_run, heartbeat, job_request
from zen.store import repository


def job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def history(zen, job_id):
    with zen.db.transaction() as session:
        return [(r["from_status"], r["to_status"]) for r in repository.job_history(session, job_id)]


def controls(publisher, vm=None):
    out = [json.loads(m.data) for m in publisher.on("zen-vm-control")]
    return [c for c in out if vm is None or c["vm"] == vm]


def test_submit_queues_job_and_publishes_start_message(functions, zen, publisher):
    functions.submit(job_request("job-1", regions=["europe-west4", "us-central1"]))

    record = job(zen, "job-1")
    assert record.status.value == "QUEUED" and record.attempt == 1
    assert record.regions == ["us-central1", "europe-west4"]  # the cluster's preference order
    assert history(zen, "job-1") == [(None, "PENDING"), ("PENDING", "QUEUED")]
    [start] = publisher.on("zen-job-start")
    assert start.attributes["cluster"] == "4xa100-40gb"
    assert start.attributes["allow_us_central1"] == "1" and "allow_us_west1" not in start.attributes
    assert json.loads(start.data)["command"] == ["python", "train.py", "--epochs", "1"]
    events = [json.loads(m.data)["to_status"] for m in publisher.on("zen-job-events")]
    assert events == ["PENDING", "QUEUED"]


def test_binary_mode_cloud_event_is_accepted(functions, zen):
    functions.send("on_job_submitted", job_request("job-bin"), binary=True)
    assert job(zen, "job-bin").status.value == "QUEUED"


def test_duplicate_submit_same_job_id_makes_one_job(functions, zen, publisher):
    functions.submit(job_request("job-1"), message_id="a")
    functions.submit(job_request("job-1"), message_id="b")
    assert len(publisher.on("zen-job-start")) == 1
    assert history(zen, "job-1") == [(None, "PENDING"), ("PENDING", "QUEUED")]


def test_duplicate_submit_same_message_id_makes_one_job(functions, zen, publisher):
    functions.submit(job_request(None), message_id="msg-42")
    functions.submit(job_request(None), message_id="msg-42")
    assert job(zen, "msg-42").status.value == "QUEUED"
    assert len(publisher.on("zen-job-start")) == 1


def test_reusing_a_job_id_for_another_request_is_rejected(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    functions.submit(job_request("job-1", command=["rm", "-rf", "/"]))
    assert job(zen, "job-1").request["command"][0] == "python"
    with zen.db.transaction() as session:
        [rejected] = repository.list_rejections(session)
    assert "already used by a different request" in rejected["reason"]


def test_full_run_records_exit_code_and_output(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    for beat in agent_run("job-1"):
        functions.heartbeat(beat)
    record = job(zen, "job-1")
    assert (record.status.value, record.exit_code, record.vm, record.message) == ("SUCCEEDED", 0, "vm-a", "done")
    assert record.started_at is not None and record.finished_at is not None
    assert history(zen, "job-1")[2:] == [("QUEUED", "ASSIGNED"), ("ASSIGNED", "RUNNING"), ("RUNNING", "SUCCEEDED")]
    assert [c["action"] for c in controls(publisher)] == ["CONFIRM"]


def test_heartbeats_twice_and_out_of_order_end_like_in_order(functions, zen):
    functions.submit(job_request("ordered"))
    functions.submit(job_request("shuffled"))
    for beat in agent_run("ordered", exit_code=3, final="FAILED"):
        functions.heartbeat(beat)
    beats = agent_run("shuffled", exit_code=3, final="FAILED")
    for beat in [beats[3], beats[1], beats[0], beats[3], beats[2], beats[1], beats[0]]:
        functions.heartbeat(beat)
    a, b = job(zen, "ordered"), job(zen, "shuffled")
    assert (a.status, a.exit_code, a.vm, a.attempt) == (b.status, b.exit_code, b.vm, b.attempt)
    assert b.status.value == "FAILED" and b.exit_code == 3


def test_running_heartbeat_after_stop_does_not_undo_it(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2))
    functions.stop({"job_id": "job-1", "reason": "wrong data"})
    assert job(zen, "job-1").status.value == "STOPPING"
    functions.heartbeat(heartbeat("job-1", "RUNNING", 3))  # late: sent before the VM saw the stop
    assert job(zen, "job-1").status.value == "STOPPING"
    functions.heartbeat(heartbeat("job-1", "STOPPED", 4, exit_code=-15))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 3))  # redelivered late
    record = job(zen, "job-1")
    assert record.status.value == "CANCELLED"
    assert history(zen, "job-1")[-2:] == [("RUNNING", "STOPPING"), ("STOPPING", "CANCELLED")]


def test_stop_of_queued_job_cancels_it(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    functions.stop({"job_id": "job-1"})
    assert job(zen, "job-1").status.value == "CANCELLED"
    assert controls(publisher) == []
    # An agent that pulled the start message before the stop is told to drop it.
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-late"))
    [release] = controls(publisher, "vm-late")
    assert release["action"] == "RELEASE"
    assert job(zen, "job-1").status.value == "CANCELLED"


def test_stop_of_running_job_sends_stop_to_its_vm(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-7"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-7"))
    functions.stop({"job_id": "job-1", "reason": "user asked"})
    stops = [m for m in publisher.on("zen-vm-control") if m.attributes["action"] == "STOP"]
    assert len(stops) == 1 and stops[0].attributes["vm"] == "vm-7"
    assert json.loads(stops[0].data) | {"version": 1} == {
        "version": 1, "vm": "vm-7", "job_id": "job-1", "attempt": 1, "action": "STOP", "reason": "user asked"}


def test_every_stop_of_a_stopping_job_says_how_long_the_vm_has_left_to_answer(functions, zen, publisher, clock):
    """Zen ends a STOPPING job without the VM's report ``stop_timeout_s`` (120 s) after the stop; each STOP
    says what is left of it (attribute ``answer_within_s``), so that the agent ends its upload in time."""
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-7"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-7"))
    functions.stop({"job_id": "job-1", "reason": "user asked"})
    clock.advance(50)
    functions.heartbeat(heartbeat("job-1", "RUNNING", 3, vm="vm-7"))  # uploading its checkpoint: told again
    stops = [m.attributes.get("answer_within_s") for m in publisher.on("zen-vm-control")
             if m.attributes["action"] == "STOP"]
    assert stops == ["120", "70"]


def test_a_preempted_vm_spends_no_attempt_even_on_the_last_one(functions, zen, publisher):
    """The VM says it is going away (spot preemption): the cloud's doing, not the job's. A job with
    max_attempts 1 ended FAILED ("attempt budget spent")."""
    functions.submit(job_request("job-1", max_attempts=1))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2))
    functions.heartbeat(heartbeat("job-1", "PREEMPTED", 3))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.max_attempts, record.vm) == ("QUEUED", 2, 2, None)
    assert [to for _, to in history(zen, "job-1")][-2:] == ["LOST", "QUEUED"]


def test_a_vm_going_away_as_it_claims_gives_the_claim_up_and_spends_nothing(functions, zen, publisher):
    """The VM shuts down while its claim waits for an answer: its agent gives the start back and says
    PREEMPTED, which may come before its CLAIMED. The attempt never ran there: the job stays QUEUED as the
    same attempt (no preemption counted: after FREE_PREEMPTIONS one spent an attempt, and with max_attempts 1
    the job ended FAILED without running), and the CLAIMED arriving after it does not make the going VM its
    holder (it would be confirmed to no one and lost to the sweep)."""
    functions.submit(job_request("job-1", max_attempts=1))
    functions.heartbeat(heartbeat("job-1", "PREEMPTED", 3))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1))  # its claim, overtaken
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.max_attempts, record.preemptions, record.vm) == (
        "QUEUED", 1, 1, 0, None)
    assert "CONFIRM" not in [c["action"] for c in controls(publisher)]
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-2"))  # another VM takes the start given back
    record = job(zen, "job-1")
    assert (record.status.value, record.vm, record.left_vms) == ("ASSIGNED", "vm-2", {"vm-a": 3})


def test_preemptions_are_free_only_so_many_times(functions, zen):
    """The agent says PREEMPTED on any SIGTERM: a job that shuts its own VM down was requeued for free on
    new VMs for ever. After FREE_PREEMPTIONS, a preemption spends an attempt as a lost VM does."""
    from zen.core.lifecycle import FREE_PREEMPTIONS

    functions.submit(job_request("job-1", max_attempts=1))
    for attempt in range(1, FREE_PREEMPTIONS + 2):
        for status, seq in (("CLAIMED", 1), ("RUNNING", 2), ("PREEMPTED", 3)):
            functions.heartbeat(heartbeat("job-1", status, seq, attempt=attempt, vm=f"vm-{attempt}"))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.preemptions) == ("FAILED", FREE_PREEMPTIONS + 1,
                                                                         FREE_PREEMPTIONS + 1)


def test_two_vms_claiming_the_same_attempt_one_wins(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-b", zone="us-central1-b"))
    assert job(zen, "job-1").vm == "vm-a"
    assert [c["action"] for c in controls(publisher, "vm-a")] == ["CONFIRM"]
    assert [c["action"] for c in controls(publisher, "vm-b")] == ["RELEASE"]


def test_claim_from_a_region_the_job_does_not_allow_is_released(functions, zen, publisher):
    functions.submit(job_request("job-1", regions=["europe-west4"]))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-us"))
    assert job(zen, "job-1").status.value == "QUEUED"
    assert [c["action"] for c in controls(publisher, "vm-us")] == ["RELEASE"]


def test_lost_job_is_requeued_then_fails_when_budget_is_spent(functions, zen, publisher, clock):
    functions.submit(job_request("job-1", max_attempts=2))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    clock.advance(60)
    functions.tick()
    assert job(zen, "job-1").status.value == "RUNNING"  # not silent long enough yet
    clock.advance(121)
    functions.tick()
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.vm) == ("QUEUED", 2, None)
    assert len(publisher.on("zen-job-start")) == 2
    assert json.loads(publisher.on("zen-job-start")[-1].data)["attempt"] == 2
    assert [c["action"] for c in controls(publisher, "vm-a")] == ["CONFIRM", "STOP"]
    # The silent VM comes back with its old attempt: told to stop, the job is untouched.
    functions.heartbeat(heartbeat("job-1", "RUNNING", 3, vm="vm-a"))
    assert job(zen, "job-1").status.value == "QUEUED"
    assert [c["action"] for c in controls(publisher, "vm-a")][-1] == "STOP"
    # Attempt 2 is claimed, then goes silent too: the budget (2) is spent.
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, attempt=2, vm="vm-b"))
    for _ in range(4):  # ticks on their schedule (a gap in the ticks would restart the deadline)
        clock.advance(50)
        functions.tick()
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt) == ("FAILED", 2)
    assert [s for _, s in history(zen, "job-1")] == [
        "PENDING", "QUEUED", "ASSIGNED", "RUNNING", "LOST", "QUEUED", "ASSIGNED", "LOST", "FAILED"]


def test_preempted_heartbeat_requeues_at_once(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1))
    functions.heartbeat(heartbeat("job-1", "PREEMPTED", 2))
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt) == ("QUEUED", 2)


def test_silent_stop_becomes_cancelled(functions, zen, clock):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1))
    functions.stop({"job_id": "job-1"})
    clock.advance(121)
    functions.tick()
    assert job(zen, "job-1").status.value == "CANCELLED"


def test_crash_between_commit_and_publish_is_repaired_by_the_tick(functions, zen, publisher):
    publisher.fail_next = 10  # Pub/Sub unreachable right after the commit
    functions.submit(job_request("job-1"))
    assert job(zen, "job-1").status.value == "QUEUED"  # the state change is safe
    assert publisher.on("zen-job-start") == []
    publisher.fail_next = 0
    functions.tick()
    assert len(publisher.on("zen-job-start")) == 1
    functions.tick()  # sent rows are not sent again
    assert len(publisher.on("zen-job-start")) == 1


def test_concurrent_tick_skips_while_another_holds_the_lock(zen):
    from zen.app import TICK_LOCK_KEY

    with zen.db.session() as session:
        assert session.one("try_tick_lock", key=TICK_LOCK_KEY)["locked"]
        try:
            assert zen.on_scale_tick().skipped
        finally:
            session.one("tick_unlock", key=TICK_LOCK_KEY)
    assert not zen.on_scale_tick().skipped


def test_stop_that_arrives_before_its_submit_cancels_the_job_on_arrival(functions, zen, publisher):
    functions.stop({"job_id": "job-1", "reason": "changed my mind"})
    functions.submit(job_request("job-1"))
    record = job(zen, "job-1")
    assert record.status.value == "CANCELLED"
    assert history(zen, "job-1") == [(None, "PENDING"), ("PENDING", "CANCELLED")]
    assert publisher.on("zen-job-start") == []


def test_a_stop_that_races_its_submit_is_applied_as_soon_as_it_is_kept(functions, zen, publisher):
    """The stop finds no job; before its transaction commits, the submission (another instance, another
    connection) commits without seeing the kept stop. Neither saw the other's row: the stop, once kept,
    looks again. The race is injected through the store's hook (two real Postgres transactions)."""
    import threading

    def submit_while_the_stop_is_uncommitted(result, job_id, reason, now, principal=None):
        submitter = threading.Thread(target=functions.submit, args=(job_request("job-1"),))
        submitter.start()
        submitter.join(30)

    zen.store.hooks.after("remember_early_stop", submit_while_the_stop_is_uncommitted)
    functions.stop({"job_id": "job-1", "reason": "changed my mind"})
    assert job(zen, "job-1").status.value == "CANCELLED"  # not QUEUED, to run although stopped
    assert history(zen, "job-1") == [(None, "PENDING"), ("PENDING", "QUEUED"), ("QUEUED", "CANCELLED")]
    with zen.db.transaction() as session:
        assert repository.take_early_stops(session, "job-1") == []  # consumed


def test_the_tick_applies_a_kept_stop_whose_job_exists_even_if_it_runs(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    with zen.db.transaction() as session:  # a stop kept while the submission committed unseen
        repository.remember_early_stop(session, "job-1", "changed my mind", zen.clock())
    assert zen.on_scale_tick().stopped == 1
    assert job(zen, "job-1").status.value == "STOPPING"
    assert [c["action"] for c in controls(publisher, "vm-a")] == ["CONFIRM", "STOP"]
    assert zen.on_scale_tick().stopped == 0  # consumed: applied once


def test_reclaims_during_stopping_neither_extend_the_stop_nor_go_unanswered(functions, zen, publisher, clock):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.stop({"job_id": "job-1"})
    for seq in range(2, 6):  # the VM missed everything and keeps asking
        clock.advance(30)
        functions.heartbeat(heartbeat("job-1", "CLAIMED", seq, vm="vm-a"))
    assert [c["action"] for c in controls(publisher, "vm-a")] == ["CONFIRM", "STOP", "STOP", "STOP", "STOP", "STOP"]
    clock.advance(1)
    functions.tick()  # past 120 s after the stop: the stop deadline has passed
    assert job(zen, "job-1").status.value == "CANCELLED"


def test_vm_heartbeats_record_the_vm_and_ignore_older_ones(functions, zen):
    def vm_beat(state, seq):
        return {"kind": "vm", "vm": "vm-a", "cluster": "4xa100-40gb", "region": "us-central1",
                "zone": "us-central1-a", "state": state, "seq": seq, "sent_at": "2026-01-01T00:00:00Z"}

    functions.heartbeat(vm_beat("BUSY", 200))
    functions.heartbeat(vm_beat("IDLE", 100))  # older, delivered late
    with zen.db.transaction() as session:
        [vm] = repository.list_vms(session)
    assert (vm["name"], vm["state"], vm["last_seq"]) == ("vm-a", "BUSY", 200)
    functions.heartbeat(vm_beat("IDLE", 300))
    with zen.db.transaction() as session:
        [vm] = repository.list_vms(session)
    assert vm["state"] == "IDLE" and vm["idle_since"] is not None


def test_unclaimed_job_gets_its_start_message_again(functions, zen, publisher, clock):
    functions.submit(job_request("job-1"))
    clock.advance(zen.config.deadlines.start_republish_s - 1)
    functions.tick()
    assert len(publisher.on("zen-job-start")) == 1
    clock.advance(2)
    functions.tick()
    starts = publisher.on("zen-job-start")
    assert len(starts) == 2 and starts[0].data == starts[1].data  # same job, same attempt
    functions.tick()
    assert len(publisher.on("zen-job-start")) == 2


def test_one_broken_job_does_not_stop_the_sweep(functions, zen, clock, config, db, publisher):
    from zen.app import Zen

    functions.submit(job_request("old", cluster="1xl4"))
    functions.submit(job_request("fine"))
    for job_id in ("old", "fine"):
        functions.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=f"vm-{job_id}"))
    # The 1xl4 cluster is removed from the configuration while its job runs.
    trimmed = config.model_copy(update={"clusters": [c for c in config.clusters if c.name != "1xl4"]})
    clock.advance(500)
    Zen(trimmed, db, publisher, clock).on_scale_tick()
    assert job(zen, "fine").status.value == "QUEUED" and job(zen, "fine").attempt == 2
    assert job(zen, "old").attempt == 2  # requeued; it waits for its cluster to come back


def test_an_outage_longer_than_the_heartbeat_timeout_does_not_stop_healthy_jobs(functions, zen, publisher, clock):
    """Postgres down for 150 s: heartbeats are refused (they wait in Pub/Sub's backoff) and the ticks
    fail. The first tick after it must not call the running job lost; a VM that stays silent is
    found one timeout later."""
    for job_id, vm in (("job-1", "vm-a"), ("job-2", "vm-b")):
        functions.submit(job_request(job_id))
        functions.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm))
        functions.heartbeat(heartbeat(job_id, "RUNNING", 2, vm=vm))
    for _ in range(3):  # the schedule: a tick a minute
        clock.advance(60)
        functions.heartbeat(heartbeat("job-1", "RUNNING", 3 + _, vm="vm-a"))
        functions.heartbeat(heartbeat("job-2", "RUNNING", 3 + _, vm="vm-b"))
        functions.tick()
    clock.advance(180)  # the outage: two ticks failed, every heartbeat refused
    functions.tick()
    assert job(zen, "job-1").status.value == "RUNNING" and job(zen, "job-2").status.value == "RUNNING"
    assert not [c for c in controls(publisher) if c["action"] == "STOP"]
    clock.advance(60)
    functions.heartbeat(heartbeat("job-1", "RUNNING", 9, vm="vm-a"))  # vm-a is alive; vm-b is gone
    functions.tick()
    clock.advance(60)
    functions.heartbeat(heartbeat("job-1", "RUNNING", 10, vm="vm-a"))
    functions.tick()  # 120 s after Zen came back: vm-b's silence now counts
    assert job(zen, "job-1").status.value == "RUNNING"
    assert job(zen, "job-2").status.value == "QUEUED" and job(zen, "job-2").attempt == 2


# -- a VM claiming again an attempt it holds or ran (review: claims answered late, copies of a start) ----
def test_a_vm_claiming_again_the_attempt_it_holds_is_answered_and_nothing_changes(functions, zen, publisher, clock):
    """The answers to VM A's CLAIMEDs came after it gave the start back; the start comes back to A,
    and an older agent claims it with seq 1, 2, 3 again. Each claim is answered as a fresh one is
    (CONFIRM while ASSIGNED, STOP while STOPPING), and none changes the job: a redelivered CLAIMED
    looks the same, and must not move the job or its deadlines."""
    functions.submit(job_request("job-1"))
    for seq in (1, 2, 3):  # applied late: A has given up and nacked the start meanwhile
        functions.heartbeat(heartbeat("job-1", "CLAIMED", seq))
    before, steps = job(zen, "job-1"), history(zen, "job-1")
    assert (before.status.value, before.vm, before.last_seq) == ("ASSIGNED", "vm-a", 3)
    answered = len(controls(publisher, "vm-a"))
    clock.advance(20)
    for seq in (1, 2, 3):
        functions.heartbeat(heartbeat("job-1", "CLAIMED", seq))
    assert [c["action"] for c in controls(publisher, "vm-a")[answered:]] == ["CONFIRM"] * 3
    after = job(zen, "job-1")
    assert (after.status, after.last_seq, after.last_heartbeat_at) == (before.status, 3, before.last_heartbeat_at)
    assert history(zen, "job-1") == steps

    functions.stop({"job_id": "job-1"})
    stopped, answered = job(zen, "job-1"), len(controls(publisher, "vm-a"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 2))  # the stop raced the claim: told to stop, not to run
    assert [c["action"] for c in controls(publisher, "vm-a")[answered:]] == ["STOP"]
    assert job(zen, "job-1").last_heartbeat_at == stopped.last_heartbeat_at  # the stop deadline stands


@pytest.mark.parametrize("seqs", [(1, 2, 3, 4), (1_767_225_600_000, 1_767_225_600_001, 1_767_225_630_000,
                                                1_767_225_660_000)], ids=["older-agent", "epoch-ms-agent"])
def test_a_claim_answered_late_runs_when_the_start_comes_back_instead_of_spending_the_attempt(
        functions, zen, publisher, clock, seqs):
    """Finding A: with one attempt to spend, the job must run on the VM that claims it again, not
    wait ASSIGNED to an idle VM until the sweep fails it. An older agent's RUNNING at or below the
    first claim's seq is dropped, but its next one arrives within the deadline; an agent sending epoch
    milliseconds goes on at once."""
    functions.submit(job_request("job-1", max_attempts=1))
    for seq in (1, 2, 3):  # applied late, after A gave the start back
        functions.heartbeat(heartbeat("job-1", "CLAIMED", seq))
    answered = len(controls(publisher, "vm-a"))
    clock.advance(20)  # the start comes back to A
    functions.heartbeat(heartbeat("job-1", "CLAIMED", seqs[0]))
    assert [c["action"] for c in controls(publisher, "vm-a")[answered:]] == ["CONFIRM"]
    for seq in seqs[1:]:  # A runs the job: RUNNING every 30 s
        functions.heartbeat(heartbeat("job-1", "RUNNING", seq))
        clock.advance(30)
    clock.advance(11)
    functions.tick()  # 121 s after the late claims
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt, record.last_seq) == ("RUNNING", 1, seqs[-1])


def test_a_second_copy_of_a_start_after_the_run_is_released_whatever_its_seq(functions, zen, publisher):
    """Finding B: the VM that ran the attempt pulls another copy of its start (a redelivery, the widened
    copy, a republish) and claims it: it is told RELEASE, else it waits, gives the copy back and gets
    it again, while real jobs wait. The job is over and stays as it ended."""
    functions.submit(job_request("job-1"))
    for beat in agent_run("job-1"):  # CLAIMED 1, RUNNING 2, 3, SUCCEEDED 4 from vm-a
        functions.heartbeat(beat)
    ended, steps, answered = job(zen, "job-1"), history(zen, "job-1"), len(controls(publisher, "vm-a"))
    for seq in (1, 2, 3, 1_767_225_600_000):  # an older agent's claim, then one sending epoch milliseconds
        functions.heartbeat(heartbeat("job-1", "CLAIMED", seq))
    assert [c["action"] for c in controls(publisher, "vm-a")[answered:]] == ["RELEASE"] * 4
    after = job(zen, "job-1")
    assert (after.status.value, after.last_seq, after.exit_code) == ("SUCCEEDED", ended.last_seq, 0)
    assert history(zen, "job-1") == steps


def test_ticks_skipped_now_and_then_do_not_put_off_a_dead_vm_s_loss(functions, zen, clock):
    """Every other tick skipped (the one before held the tick lock past a minute): the first long
    interval may restart the deadline, the schedule is then learnt, and the job is lost in time."""
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))  # then vm-a dies
    functions.tick()
    clock.advance(60)
    functions.tick()
    for _ in range(4):  # twelve minutes
        clock.advance(120)
        functions.tick()
        clock.advance(60)
        functions.tick()
    assert job(zen, "job-1").status.value == "QUEUED" and job(zen, "job-1").attempt == 2


def test_a_vm_that_becomes_usable_runs_a_scaling_pass_for_its_cluster(functions, zen):
    """A VM's IDLE heartbeat after it booted, or after its job, runs its cluster's scaling pass at
    once (it deletes the boots that lost the race to this VM, as the original system cancels its
    extra boots the moment one VM is usable); other VM heartbeats, a repeated IDLE or one delivered
    late, run none (the tick's pass covers them)."""
    from tests.test_queues_waiting import CountingScaler

    zen.scaler = scaler = CountingScaler()

    def vm_beat(state, seq):
        return {"kind": "vm", "vm": "vm-a", "cluster": "4xa100-40gb", "region": "us-central1",
                "zone": "us-central1-a", "state": state, "seq": seq, "sent_at": "2026-01-01T00:00:00Z"}

    functions.heartbeat(vm_beat("IDLE", 100))  # booted
    assert scaler.passes == ["4xa100-40gb"]
    functions.heartbeat(vm_beat("IDLE", 200))  # the period's heartbeat: nothing new
    functions.heartbeat(vm_beat("BUSY", 300))
    assert scaler.passes == ["4xa100-40gb"]
    functions.heartbeat(vm_beat("IDLE", 400))  # its job ended
    functions.heartbeat(vm_beat("BUSY", 350))  # older, delivered late: changes nothing
    assert scaler.passes == ["4xa100-40gb", "4xa100-40gb"]


def test_a_vm_heartbeat_written_meanwhile_is_the_state_before(db):
    """Two heartbeats of one VM at once, BUSY(300) then IDLE(400), on IDLE(200): the second waits for
    the first and sees BUSY before it, so the change to usable is seen (a plain read saw IDLE: missed)."""
    import threading
    import time
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)

    def up(session, state, seq):
        return repository.upsert_vm(session, name="vm-a", cluster="c", region="r", zone="z", state=state,
                                    job_id=None, attempt=None, seq=seq, sent_at=now, now=now)

    with db.transaction() as session:
        assert up(session, "IDLE", 200) == ""  # not heard from before
    seen = {}
    writing = db.transaction()
    first = writing.__enter__()
    seen["BUSY"] = up(first, "BUSY", 300)  # holds the row, not committed yet

    def second() -> None:
        with db.transaction() as session:
            seen["IDLE"] = up(session, "IDLE", 400)

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.3)  # the second waits on the row
    writing.__exit__(None, None, None)
    thread.join(10)
    assert seen == {"BUSY": "IDLE", "IDLE": "BUSY"}


def test_claims_from_the_restarted_agent_of_a_running_attempt_do_not_keep_it_alive(functions, zen, clock, config):
    """An agent never claims an attempt it runs: the holder of a RUNNING attempt claiming it is its agent
    restarted, whose run ended with the old one (a spare copy of the start pulled again). Its CLAIMEDs renewed
    the attempt's heartbeat deadline, so the dead attempt stayed RUNNING, its VM and quota held, as long as the
    copy came back (hours); the sweep now takes it for lost after heartbeat_timeout_s as any silent run."""
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2))
    timeout = config.deadlines.heartbeat_timeout_s
    for seq in range(10, 10 + int(timeout // 20) + 3):  # a CLAIMED every 20 s past the deadline
        clock.advance(20)
        functions.heartbeat(heartbeat("job-1", "CLAIMED", seq))
        functions.tick()
    record = job(zen, "job-1")
    assert (record.status.value, record.attempt) == ("QUEUED", 2)


def test_the_vms_that_gave_an_attempt_up_are_kept_bounded():
    from zen.core.reports import MAX_LEFT_VMS, gave_up

    left = None
    for n in range(MAX_LEFT_VMS + 5):
        left = gave_up(left, f"vm-{n}", 1000 + n)
    assert len(left) == MAX_LEFT_VMS and "vm-0" not in left and left["vm-104"] == 1104


def test_a_second_outage_soon_after_a_first_stops_no_healthy_job(functions, zen, publisher, clock):
    """A ten-minute outage, five healthy minutes, then three minutes more (longer than heartbeat_timeout_s):
    the first tick after it, before Pub/Sub redelivers the heartbeats refused meanwhile, took the running job
    for lost (the first outage had taught the tick clock a 600 s schedule)."""
    functions.submit(job_request("job-1"))
    seq = iter(range(1, 100))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", next(seq), vm="vm-a"))
    for _ in range(4):  # a tick a minute
        functions.heartbeat(heartbeat("job-1", "RUNNING", next(seq), vm="vm-a"))
        clock.advance(60)
        functions.tick()
    clock.advance(600)
    functions.tick()
    for _ in range(5):
        functions.heartbeat(heartbeat("job-1", "RUNNING", next(seq), vm="vm-a"))
        clock.advance(60)
        functions.tick()
    functions.heartbeat(heartbeat("job-1", "RUNNING", next(seq), vm="vm-a"))
    clock.advance(180)
    functions.tick()
    assert (job(zen, "job-1").status.value, job(zen, "job-1").attempt) == ("RUNNING", 1)
    assert not [c for c in controls(publisher) if c["action"] == "STOP"]
    clock.advance(zen.config.deadlines.heartbeat_timeout_s + 1)  # a VM really gone is found a timeout later
    functions.tick()
    assert (job(zen, "job-1").status.value, job(zen, "job-1").attempt) == ("QUEUED", 2)
