"""The lost-job sweep holds silences by the delivery lag the heartbeat function sees on the reports that come
through (``zen.jobs.probes.heard_late``), through the functions, Postgres and the Pub/Sub stand-in.

The heartbeat function at its instance limit answers some pushes 429; Pub/Sub tries each refused one again in its
own backoff (10 to 600 s later). The tick's probes come through at their first try while every report of vm-a's
attempt waits: on the probes alone, the sweep took that attempt for lost at 240 s (requeued as attempt 2) while its
agent's fence, renewed by Pub/Sub's acceptance of its reports, had 95 s left. Here another VM's reports come through
150 s late: the sweep counts silences only up to now less that lag, and vm-a's attempt is still RUNNING at 240 s.
If no report at all comes through late (every report but vm-a's prompt, or vm-a's alone held back), the race stays:
the probe alone decides, and the attempt is taken for lost at 240 s as before.
"""

import json
from datetime import timedelta

from tests.messages import heartbeat, job_request
from zen.agent.fence import fence_left
from zen.agent.reports import AttemptReport
from zen.agent.settings import AgentSettings, with_deadlines
from zen.jobs import probes
from zen.store import repository

LAG = timedelta(seconds=150)  # vm-b's reports: refused, then delivered by Pub/Sub's backoff


def _job(zen, job_id="job-1"):
    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
    return job.status.value, job.attempt


def _lag_kept(zen):
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT delivery_lag_s, delivery_lag_at FROM tick_clock")
    return row["delivery_lag_s"], row["delivery_lag_at"]


def _run(functions, zen, publisher, clock, late_vm_b: bool):
    """Up to t=240: probes come through at once, vm-a's reports wait, vm-b's come through (LAG late if late_vm_b)."""
    settings = with_deadlines(AgentSettings(), zen.config.deadlines, {})
    t0 = clock().timestamp()
    now = lambda: clock().timestamp() - t0  # noqa: E731
    functions.tick()
    functions.submit(job_request("job-1"))
    functions.submit(job_request("job-2"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    functions.heartbeat(heartbeat("job-2", "CLAIMED", 1, vm="vm-b"))
    functions.heartbeat(heartbeat("job-2", "RUNNING", 2, vm="vm-b"))
    assert _lag_kept(zen) == (None, None)  # reports on time: nothing written
    attempt = AttemptReport("job-1", 1, accepted_at=now())
    seen, seq = 0, 3
    for step in range(1, 9):  # t = 30 .. 240
        clock.advance(30)
        attempt.accepted_at, seq = now(), seq + 1  # vm-a's report accepted by Pub/Sub (its fence renewed), held
        published = clock() - LAG if late_vm_b else clock()
        functions.heartbeat(heartbeat("job-2", "RUNNING", seq, vm="vm-b"), publish_time=published)
        if step % 2 == 0:
            seen = _tick_hearing_probes(functions, publisher, seen)
    assert round(now()) == 240
    return fence_left(attempt, settings, now())


def _tick_hearing_probes(functions, publisher, seen: int) -> int:
    """A tick, and the probes it published heard at once (the path lets them through); returns the messages seen."""
    functions.tick()
    msgs = publisher.on("zen-heartbeats")
    for m in msgs[seen:]:
        if json.loads(m.data).get("kind") == "probe":
            functions.heartbeat(json.loads(m.data))
    return len(msgs)


def test_reports_through_late_hold_the_silence_of_an_attempt_held_back(functions, zen, publisher, clock):
    fence = _run(functions, zen, publisher, clock, late_vm_b=True)
    assert fence > 0  # vm-a's agent still runs its job
    assert _job(zen) == ("RUNNING", 1)
    assert _lag_kept(zen)[0] == LAG.total_seconds()
    # vm-a's backlog comes through at last: the same attempt, never rerun
    for seq in range(3, 11):
        functions.heartbeat(heartbeat("job-1", "RUNNING", seq, vm="vm-a"), publish_time=clock() - LAG)
    assert _job(zen) == ("RUNNING", 1)


def test_the_hold_ends_a_timeout_after_the_last_late_report(functions, zen, publisher, clock):
    """A VM really gone is still found: once reports come through on time, the lag kept stops holding after a
    heartbeat timeout, and vm-a's silence (it never reports again) counts to the probe's bound."""
    _run(functions, zen, publisher, clock, late_vm_b=True)
    timeout_s = zen.config.deadlines.heartbeat_timeout_s
    deadline = clock() + timedelta(seconds=3 * timeout_s)
    seen = len(publisher.on("zen-heartbeats"))
    while _job(zen)[1] == 1 and clock() < deadline:
        clock.advance(30)
        seen = _tick_hearing_probes(functions, publisher, seen)
    assert _job(zen) == ("QUEUED", 2)


def test_without_a_late_report_the_probe_alone_decides(functions, zen, publisher, clock):
    """The race left: no report comes through late, so nothing holds the silence past the probe's bound."""
    _run(functions, zen, publisher, clock, late_vm_b=False)
    assert _lag_kept(zen) == (None, None)
    assert _job(zen) == ("QUEUED", 2)


def test_a_lag_noted_after_the_tick_read_its_clock_holds_that_tick(zen, clock):
    """The sweep reads its clock, then begins its transaction; a late report handled in between is kept with a
    time after the sweep's now, and still holds that sweep's silences (else a tick amid a backlog counted to now)."""
    now = clock()
    with zen.store.transaction() as tx:
        tx.record_tick(now, zen.config.deadlines.heartbeat_timeout_s / 2)
    got_at = now + timedelta(seconds=1)
    probes.heard_late(zen.store, zen.config, got_at - LAG, got_at)
    assert _lag_kept(zen) == (LAG.total_seconds(), got_at)
    with zen.store.transaction() as tx:
        until = probes.looked_at(tx, zen.config, now)[1]
    assert until <= now - LAG
