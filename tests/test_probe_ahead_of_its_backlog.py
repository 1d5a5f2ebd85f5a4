"""The heartbeat function down for six minutes (its reports and probes accepted by Pub/Sub, each refused and retried
in its own backoff) while the scale ticks run on time. Pub/Sub redelivers in no order: the newest messages, refused
fewer times, come back soonest. The tick's probe that replaced the one unheard two timeouts (sent during the outage)
came through before the agent's reports of those minutes, and a tick ran in between: the probe vouched for the path
up to its sending, the sweep took the running attempt for lost and queued attempt 2 while its agent's fence was up
(every report was accepted: Pub/Sub took them). A probe that replaced one unheard, or the one it replaced, now says
the path was stalled: silences count afresh from when it came through, as after a gap in the ticks. Through the
functions, against Postgres and the Pub/Sub stand-in; the fence's arithmetic is the agent's own."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from zen.agent.fence import fence_left
from zen.agent.reports import AttemptReport
from zen.agent.settings import AgentSettings, with_deadlines
from zen.store import repository


def _job(zen, job_id="job-1"):
    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
    return job.status.value, job.attempt


def _probes(publisher, seen: int) -> tuple[list[dict], int]:
    """The tick's probes published on zen-heartbeats since ``seen`` messages, and how many there are now."""
    messages = publisher.on("zen-heartbeats")
    return [json.loads(m.data) for m in messages[seen:] if json.loads(m.data).get("kind") == "probe"], len(messages)


def _outage_then_newest_first(functions, zen, publisher, clock, first: int) -> tuple[float, list[dict], int]:
    """job-1 RUNNING on vm-a from t=0, its reports every 30 s, a tick each minute; the heartbeat function is down
    from t=5 to t=410 (every message held). Then the probe ``first`` (0: the tick's replacement of t=360, 1: the one
    it replaced, of t=60) comes through alone, and the tick of t=420 runs. Returns the agent's fence left then, the
    messages still held, and how many zen-heartbeats carried before that tick."""
    settings = with_deadlines(AgentSettings(), zen.config.deadlines, {})
    t0 = clock().timestamp()
    now = lambda: clock().timestamp() - t0  # noqa: E731
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    attempt = AttemptReport("job-1", 1, accepted_at=now())
    functions.tick()
    probes, seen = _probes(publisher, 0)
    for probe in probes:  # t=0: the path is prompt
        functions.heartbeat(probe)
    held: list[dict] = []
    seq = 3
    for step in range(1, 14):  # t = 30 .. 390: reports accepted (the fence renewed), none delivered
        clock.advance(30)
        held.append(heartbeat("job-1", "RUNNING", seq, vm="vm-a"))
        attempt.accepted_at, seq = now(), seq + 1
        if step % 2 == 0:
            functions.tick()
            probes, seen = _probes(publisher, seen)
            held += probes
            assert _job(zen) == ("RUNNING", 1)
    clock.advance(15)  # t=405: one more report, accepted, held
    held.append(heartbeat("job-1", "RUNNING", seq, vm="vm-a"))
    attempt.accepted_at = now()
    clock.advance(7)  # t=412: the function is back; one probe of the outage comes through first
    probes_held = [m for m in held if m.get("kind") == "probe"]
    assert len(probes_held) == 2  # the probe of t=60, replaced unheard at t=360 by the tick's new one
    pick = probes_held[-1] if first == 0 else probes_held[0]
    functions.heartbeat(pick)
    clock.advance(8)  # t=420: the tick, before the reports of the outage come through
    _, seen = _probes(publisher, seen)
    functions.tick()
    return fence_left(attempt, settings, now()), [m for m in held if m is not pick], seen


def test_a_replacement_probe_ahead_of_the_outages_reports_takes_no_attempt_for_lost(functions, zen, publisher, clock):
    left, held, _ = _outage_then_newest_first(functions, zen, publisher, clock, first=0)
    assert left > 0, left  # vm-a's job is running: a rerun would run beside it
    assert _job(zen) == ("RUNNING", 1), f"taken for lost with {left:.0f} s of vm-a's fence left"
    for message in held:  # the rest of the backlog
        functions.heartbeat(message)
    assert _job(zen) == ("RUNNING", 1)


def test_the_replaced_probe_ahead_of_the_outages_reports_takes_no_attempt_for_lost(functions, zen, publisher, clock):
    left, _, _ = _outage_then_newest_first(functions, zen, publisher, clock, first=1)
    assert left > 0 and _job(zen) == ("RUNNING", 1), f"taken for lost with {left:.0f} s of vm-a's fence left"


def test_a_vm_gone_during_the_outage_is_found_once_the_path_is_prompt_again(functions, zen, publisher, clock):
    """vm-a died at t=405: its reports of the outage come through, none after; the path prompt from t=420."""
    _, held, seen = _outage_then_newest_first(functions, zen, publisher, clock, first=0)
    for message in held:
        functions.heartbeat(message)
    for _ in range(4):  # the probe of t=420 comes through at once, and the next ones: four minutes
        probes, seen = _probes(publisher, seen)
        for probe in probes:
            functions.heartbeat(probe)
        clock.advance(60)
        functions.tick()
    assert _job(zen) == ("QUEUED", 2)
