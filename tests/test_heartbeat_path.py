"""Reports Pub/Sub accepted but delivers late (the heartbeat function at its instance limit, answering 429 or 5xx,
out of database connections: the push backs off) while the scale ticks run on time. The agent's fence is renewed
by every *accepted* report; Zen counted silence from the last report it *handled*: the sweep took the attempt for
lost and a second VM was confirmed while the first still ran its job (95 s of its fence left: only the STOP the
sweep sends could end it sooner; tests/faults/test_slow_heartbeat_path.py runs it with real agents). Each tick now
probes the heartbeat path (``zen.jobs.probes``): a probe unheard past the fence's margin holds every silence.
Through the functions, against Postgres and the Pub/Sub stand-in; the fence's arithmetic is the agent's own."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from zen.agent.fence import fence_left
from zen.agent.reports import AttemptReport
from zen.agent.settings import AgentSettings, with_deadlines
from zen.store import repository
from zen.store.migrate import MIGRATIONS_DIR


def _controls(publisher, vm):
    return [(json.loads(m.data)["action"], json.loads(m.data)["attempt"]) for m in publisher.on("zen-vm-control")
            if m.attributes["vm"] == vm]


class _Path:
    """zen-heartbeats as the heartbeat function receives it: the tick's probes delivered, or held back."""

    def __init__(self, functions, publisher):
        self.functions, self.publisher, self.seen, self.held = functions, publisher, 0, []

    def probes(self) -> list[dict]:
        new = self.publisher.on("zen-heartbeats")[self.seen:]
        self.seen += len(new)
        return [json.loads(m.data) for m in new if json.loads(m.data).get("kind") == "probe"]

    def tick(self, deliver: bool) -> None:
        self.functions.tick()
        for probe in self.probes():
            self.functions.heartbeat(probe) if deliver else self.held.append(probe)

    def send(self, report: dict, deliver: bool) -> None:
        self.functions.heartbeat(report) if deliver else self.held.append(report)

    def catch_up(self) -> None:
        for message in self.held:
            self.functions.heartbeat(message)
        self.held = []


def _job(zen, job_id="job-1"):
    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
    return job.status.value, job.attempt


def test_no_attempt_is_taken_for_lost_while_the_heartbeat_path_holds_its_reports_back(
        functions, zen, publisher, clock):
    settings = with_deadlines(AgentSettings(), zen.config.deadlines, {})
    path, t0 = _Path(functions, publisher), clock().timestamp()
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    assert _controls(publisher, "vm-a") == [("CONFIRM", 1)]
    attempt = AttemptReport("job-1", 1, accepted_at=clock().timestamp() - t0)
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    path.tick(deliver=True)  # the path is prompt: its probe comes through

    seq = 3
    for _ in range(8):  # 4 minutes, ticks every 30 s: vm-a's reports are accepted (its fence renewed), not delivered
        clock.advance(30)
        path.send(heartbeat("job-1", "RUNNING", seq, vm="vm-a"), deliver=False)
        attempt.accepted_at, seq = clock().timestamp() - t0, seq + 1
        path.tick(deliver=False)
        assert _job(zen) == ("RUNNING", 1), "taken for lost while its reports waited in Pub/Sub"
    assert fence_left(attempt, settings, clock().timestamp() - t0) > 0  # vm-a's job runs: a rerun would be beside it

    path.catch_up()  # the path flows again: the late probes and reports come through
    assert _job(zen) == ("RUNNING", 1)
    for _ in range(3):  # and stays prompt: vm-a reports as ever
        clock.advance(30)
        path.send(heartbeat("job-1", "RUNNING", seq, vm="vm-a"), deliver=True)
        seq += 1
        path.tick(deliver=True)
    assert _job(zen) == ("RUNNING", 1)

    # vm-a is really gone now (nothing of it is accepted any more) while the path is prompt: lost after the timeout.
    gone_at = clock().timestamp() - t0
    for _ in range(6):
        clock.advance(30)
        path.tick(deliver=True)
    assert _job(zen) == ("QUEUED", 2)
    attempt.accepted_at = gone_at
    assert fence_left(attempt, settings, clock().timestamp() - t0) <= 0  # its fence fell before the rerun


def test_a_probe_heard_late_vouches_up_to_its_sending_and_a_stranger_is_a_duplicate(functions, zen, publisher, clock):
    """A probe heard late says the path delivered what Pub/Sub accepted up to when it was sent: silences count to
    then (before, to now from when it was heard, which a path slow for good held for ever)."""
    path = _Path(functions, publisher)
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    path.tick(deliver=True)  # t=0: vm-a's last word
    clock.advance(60)
    path.tick(deliver=False)  # t=60: its probe waits, and comes through 30 s late, before the next tick looks
    clock.advance(30)
    path.catch_up()
    clock.advance(40)  # t=130: 130 s without vm-a's word, 60 s of it vouched for: not yet
    path.tick(deliver=True)
    assert _job(zen) == ("RUNNING", 1)
    clock.advance(60)  # t=190: 130 s vouched for (the probe of t=130 came through at once)
    path.tick(deliver=True)
    assert _job(zen) == ("QUEUED", 2)
    answer = functions.heartbeat({"kind": "probe", "nonce": "0" * 32})  # not the tick's: changes nothing
    assert answer.status_code == 200
    functions.heartbeat({"kind": "probe", "nonce": "not hex"})  # malformed: refused, recorded, acked
    with zen.db.transaction() as session:
        assert any("nonce" in r["reason"] for r in repository.list_rejections(session))


def test_probes_that_could_not_be_published_hold_silences_for_a_bounded_time(functions, zen, publisher, clock):
    """A probe the tick could not publish (its account no longer allowed on zen-heartbeats, Pub/Sub down) vouches
    for nothing (the path may have stalled meanwhile); held for good, a job on a dead VM would never come back."""
    path = _Path(functions, publisher)
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    path.tick(deliver=True)  # probes come through: the path is watched
    for minute in range(1, 23):  # vm-a is gone; every probe's publish fails: held 10 timeouts (20 min), not for ever
        clock.advance(60)
        publisher.fail_next = 1
        path.tick(deliver=True)
        assert _job(zen) == (("RUNNING", 1) if minute <= 20 else ("QUEUED", 2)), minute
    clock.advance(30)
    path.tick(deliver=True)  # and the next probe goes out
    assert path.seen and _job(zen) == ("QUEUED", 2)


def _running(functions, zen, publisher, clock):
    """job-1 RUNNING on vm-a from now (t=0): the agent's settings under Zen's deadlines, the path, the seconds since
    t=0, and the attempt's report as the agent keeps it (when Pub/Sub last accepted one of its reports)."""
    settings = with_deadlines(AgentSettings(), zen.config.deadlines, {})
    path, t0 = _Path(functions, publisher), clock().timestamp()
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    return settings, path, lambda: clock().timestamp() - t0, AttemptReport("job-1", 1, accepted_at=0.0)


def test_a_stall_after_the_last_probe_came_through_holds_silences_across_a_skipped_tick(functions, zen, publisher, clock):
    """Default deadlines (120 s, 30 s reports, 95 s fence), the default one-minute schedule. Ten minutes of regular
    ticks; then one tick is skipped (a long pass held the lock: the next is a gap, back_at moves, harmless), two run
    on time, and another is skipped, the next 5 s late: the tick clock, having learnt the first skip, counts it as no
    gap (by design: "ticks skipped now and then are no gap"). The heartbeat path stalls right after the last tick's
    probe came through: the next sweep, 125 s later, takes the attempt for lost on the word of that probe, sent
    125 s before, while its agent's fence is up for 60 s more."""
    settings, path, now, attempt = _running(functions, zen, publisher, clock)
    seq = 3
    # t = 0 .. 840: ticks every 60 s but 660 skipped; reports every 30 s, all delivered promptly, every probe too
    for t in range(30, 841, 30):
        clock.advance(30)
        path.send(heartbeat("job-1", "RUNNING", seq, vm="vm-a"), deliver=True)
        attempt.accepted_at, seq = now(), seq + 1
        if t % 60 == 0 and t != 660:
            path.tick(deliver=True)
    assert _job(zen) == ("RUNNING", 1)
    # t = 840: the tick's probe came through at once. The heartbeat function stalls now (out of connections):
    # vm-a's reports, accepted by Pub/Sub (its fence renewed), wait undelivered. The tick at 900 is skipped.
    for _ in range(3):  # 870, 900, 930
        clock.advance(30)
        path.send(heartbeat("job-1", "RUNNING", seq, vm="vm-a"), deliver=False)
        attempt.accepted_at, seq = now(), seq + 1
    clock.advance(35)  # t = 965: the schedule's tick at 960, 5 s late
    path.tick(deliver=False)
    left = fence_left(attempt, settings, now())
    assert left > 0, left  # vm-a's job is running, its fence up
    assert _job(zen) == ("RUNNING", 1), f"taken for lost with {left:.0f} s of vm-a's fence left"


def test_a_stall_after_the_last_probe_came_through_holds_silences_with_a_shorter_timeout(functions, zen, publisher, clock):
    """heartbeat_timeout_s 60 with reports every 10 s (a fence of 35 s: allowed), ticks every minute as the default
    schedule runs them, none skipped. The path stalls right after a tick's probe came through: the next tick's
    sweep took the attempt for lost while its fence was up."""
    deadlines = zen.config.deadlines.model_copy(update={"heartbeat_timeout_s": 60.0, "agent_heartbeat_s": 10.0})
    zen.config = zen.config.model_copy(update={"deadlines": deadlines})
    zen.jobs._config = zen.config
    zen.jobs.sweeps._config = zen.config
    settings, path, now, attempt = _running(functions, zen, publisher, clock)
    seq = 3
    for t in range(10, 181, 10):  # three minutes of prompt reports; ticks each minute, probes prompt
        clock.advance(10)
        path.send(heartbeat("job-1", "RUNNING", seq, vm="vm-a"), deliver=True)
        attempt.accepted_at, seq = now(), seq + 1
        if t % 60 == 0:
            path.tick(deliver=True)
    assert _job(zen) == ("RUNNING", 1)
    for _ in range(6):  # t = 180 .. 240: the path stalls right after the tick's probe came through
        clock.advance(10)
        path.send(heartbeat("job-1", "RUNNING", seq, vm="vm-a"), deliver=False)
        attempt.accepted_at, seq = now(), seq + 1
    clock.advance(3)
    path.tick(deliver=False)  # t = 243: the schedule's tick at 240, 3 s late
    left = fence_left(attempt, settings, now())
    assert left > 0, left
    assert _job(zen) == ("RUNNING", 1), f"taken for lost with {left:.0f} s of vm-a's fence left"


def test_a_steadily_slow_path_delays_a_gone_vms_verdict_by_its_lag_only(functions, zen, publisher, clock):
    """The heartbeat function keeps a steady 20 s backlog (every message, probes and reports alike, delivered 20 s
    after Pub/Sub accepted it: no report is ever held longer than the others, so Zen's silence of a VM never starts
    before its agent's fence does, and the fence's arithmetic holds). Each probe is heard 20 s late (over the 15 s
    margin): back_at moved every tick, without bound, and a job whose VM was really gone was never requeued."""
    path = _Path(functions, publisher)
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    path.tick(deliver=True)  # probes come through: the path is watched
    # vm-a is gone from now on. The ticks run every minute; each probe comes through 20 s after it was sent.
    clock.advance(20)
    for _ in range(4):
        clock.advance(40)
        path.tick(deliver=False)  # a tick each minute
        clock.advance(20)
        path.catch_up()  # its probe heard 20 s later
    assert _job(zen) == ("QUEUED", 2), "vm-a gone for 4 minutes, its job not requeued"


def _stalled(functions, zen, publisher, clock, at_tick) -> None:
    """vm-a reports every 30 s, each accepted (its fence renewed), from t=30 none delivered (the heartbeat function
    stalled); a tick each minute, ``at_tick(t)`` before each; the attempt must stay RUNNING while its fence is up."""
    settings, path, now, attempt = _running(functions, zen, publisher, clock)
    path.tick(deliver=True)  # t=0: the path is prompt, its probe heard
    for step in range(1, 11):  # t = 30 .. 300
        clock.advance(30)
        path.send(heartbeat("job-1", "RUNNING", step + 2, vm="vm-a"), deliver=False)
        attempt.accepted_at = now()
        if step % 2 == 0:
            at_tick(now())
            path.tick(deliver=False)
            left = fence_left(attempt, settings, now())
            assert left > 0 and _job(zen) == ("RUNNING", 1), f"t={now():.0f}: taken for lost, {left:.0f} s of fence left"


def test_a_probe_not_published_vouches_for_no_stalled_path(functions, zen, publisher, clock):
    """The stale probe of t=60 replaced at t=240 by one whose publish fails: taken as prompt up to its tick (as a
    probe not published is while the path was good), it took the attempt for lost with 95 s of fence left."""
    _stalled(functions, zen, publisher, clock, lambda t: setattr(publisher, "fail_next", 1) if t == 240 else None)


def test_a_stall_across_migration_0041_holds_silences(functions, zen, publisher, clock):
    """0041 run while the tick's probe is outstanding: nothing vouched yet, it holds silences from the last tick (as
    after a gap); counted to now, the stall took the attempt for lost at t=180."""
    update = next(part for part in (MIGRATIONS_DIR / "0041_probe_vouched.sql").read_text().split(";")
                  if "UPDATE tick_clock" in part)

    def migrate_0041(t: float) -> None:
        if t == 120:  # the probe of t=60 unheard; 0041's columns as a database of 0040's release had them
            with zen.db.transaction() as session:
                session.execute("UPDATE tick_clock SET probe_vouched_at = NULL, probe_prev_nonce = NULL, "
                                "probe_prev_sent_at = NULL")
                session.execute(update)
    _stalled(functions, zen, publisher, clock, migrate_0041)


def test_a_path_steadily_200s_behind_delays_a_gone_vms_verdict_by_its_lag_only(functions, zen, publisher, clock):
    """Longer than a probe's replacement: each probe replaced before it arrived was a duplicate, and nothing ever
    vouched (the job of a VM gone for 20 minutes never requeued); replaced, it is kept and still vouches."""
    t0, queue = clock().timestamp(), []
    now = lambda: clock().timestamp() - t0  # noqa: E731
    path = _Path(functions, publisher)
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    path.tick(deliver=True)  # t=0: probes come through; vm-a is gone from now on, the path 200 s behind
    for step in range(1, 20 * 6 + 1):  # 20 minutes in 10 s steps, a tick each minute
        clock.advance(10)
        for probe in [probe for at, probe in queue if at <= now()]:
            functions.heartbeat(probe)
        queue = [(at, probe) for at, probe in queue if at > now()]
        if step % 6 == 0:
            functions.tick()
            queue += [(now() + 200, probe) for probe in path.probes()]
    assert _job(zen) == ("QUEUED", 2), "vm-a gone 20 minutes under a steady 200 s lag, its job not requeued"


def _short_timeout(zen):
    deadlines = zen.config.deadlines.model_copy(update={"heartbeat_timeout_s": 60.0, "agent_heartbeat_s": 10.0})
    zen.config = zen.config.model_copy(update={"deadlines": deadlines})
    zen.jobs._config = zen.config
    zen.jobs.sweeps._config = zen.config
    return deadlines


def _stall_with_failed_publishes(functions, zen, publisher, clock, period, fail_at, until):
    """The path stalls right after the tick's probe at t=0 came through (vm-a's reports accepted, none delivered);
    ticks every 60 s; the probe publishes of the ticks in ``fail_at`` fail (each vouched 'up to its tick')."""
    settings, path, now, attempt = _running(functions, zen, publisher, clock)
    clock.advance(5)
    path.tick(deliver=True)  # t=5: the path is prompt, its probe heard; the stall begins
    seq = 3
    while now() < until:  # 5 s steps: reports every ``period`` from t=0, ticks at 5, 65, 125, ... (5 s past the minute)
        clock.advance(5)
        t = round(now())
        if t % period == 0:
            path.send(heartbeat("job-1", "RUNNING", seq, vm="vm-a"), deliver=False)
            attempt.accepted_at, seq = now(), seq + 1
        if t % 60 == 5:
            if t in fail_at:
                publisher.fail_next = 1
            path.tick(deliver=False)
            left = fence_left(attempt, settings, now())
            assert left > 0
            assert _job(zen) == ("RUNNING", 1), f"t={t}: taken for lost with {left:.0f} s of vm-a's fence left"


def test_probes_not_published_during_a_stall_vouch_for_nothing(functions, zen, publisher, clock):
    """Default deadlines: the stall begins right after the probe of t=5 came through; the probes of t=65 and t=125
    cannot be published: each vouched up to its tick, and the attempt was taken for lost with 90 s of fence left."""
    _stall_with_failed_publishes(functions, zen, publisher, clock, 30, {65, 125}, 300)


def test_a_probe_not_published_during_a_stall_vouches_for_nothing_with_timeout_60(functions, zen, publisher, clock):
    """heartbeat_timeout_s 60, reports every 10 s (fence 35 s): one failed probe publish right after the stall."""
    _short_timeout(zen)
    _stall_with_failed_publishes(functions, zen, publisher, clock, 10, {65}, 240)


def test_a_dead_lettered_probe_then_failing_publishes_hold_a_dead_vms_job_a_bounded_time(functions, zen, publisher, clock):
    """vm-a is gone at t=0. The probe of t=60 is never delivered (dead-lettered while the heartbeat function
    answered 5xx); replaced unheard at t=360 it is kept as the previous probe. From then on the tick cannot
    publish on zen-heartbeats (its account's grant removed, the case probe_unsent's vouching is there for):
    nothing vouched any more, and vm-a's job was held for good; now for ten timeouts."""
    path = _Path(functions, publisher)
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    path.tick(deliver=True)  # t=0: probes come through
    clock.advance(60)
    path.tick(deliver=False)  # t=60: its probe is dead-lettered
    path.held = []
    for t in range(120, 3601, 60):  # an hour
        clock.advance(60)
        if t >= 360:
            publisher.fail_next = 1
        path.tick(deliver=True)
    assert _job(zen) == ("QUEUED", 2), "vm-a gone an hour, its job not requeued"


def test_a_stall_after_zens_clock_stepped_back_is_held(functions, zen, publisher, clock):
    """Zen's clock steps back 300 s (an NTP correction) right after the tick's probe of t=0 came through; the path is
    prompt for two minutes more, then stalls. probe_vouched_at stayed at the probe sent before the step, in Zen's
    future, no later probe moved it, and silences counted to now for 300 s; a probe heard then starts it afresh."""
    settings = with_deadlines(AgentSettings(), zen.config.deadlines, {})
    path, real = _Path(functions, publisher), 0.0  # real: the agent's own (monotonic) seconds
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    attempt = AttemptReport("job-1", 1, accepted_at=real)
    path.tick(deliver=True)  # t=0: the probe heard
    clock.advance(-300)  # Zen's clock steps back
    seq = 3
    for step in range(1, 11):  # reports every 30 s, delivered until t=120, then the path stalls; ticks each minute
        clock.advance(30)
        real += 30
        path.send(heartbeat("job-1", "RUNNING", seq, vm="vm-a"), deliver=real <= 120)
        attempt.accepted_at, seq = real, seq + 1
        if step % 2 == 0:
            path.tick(deliver=real <= 120)
            left = fence_left(attempt, settings, real)
            assert left > 0
            assert _job(zen) == ("RUNNING", 1), f"t={real:.0f}: taken for lost with {left:.0f} s of vm-a's fence left"
