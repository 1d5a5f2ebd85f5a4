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


def test_a_probe_heard_late_holds_silences_from_then_and_a_stranger_is_a_duplicate(functions, zen, publisher, clock):
    path = _Path(functions, publisher)
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    path.tick(deliver=True)  # t=0: vm-a's last word
    clock.advance(60)
    path.tick(deliver=False)  # t=60: its probe waits, and comes through 30 s late, before the next tick looks
    clock.advance(30)
    path.catch_up()
    clock.advance(40)  # t=130: 130 s without vm-a's word, but the path was late 40 s ago: not yet
    path.tick(deliver=True)
    assert _job(zen) == ("RUNNING", 1)
    clock.advance(60)  # t=190: 100 s since the path came back
    path.tick(deliver=True)
    assert _job(zen) == ("RUNNING", 1)
    clock.advance(60)  # t=250: 160 s
    path.tick(deliver=True)
    assert _job(zen) == ("QUEUED", 2)
    answer = functions.heartbeat({"kind": "probe", "nonce": "0" * 32})  # not the tick's: changes nothing
    assert answer.status_code == 200
    functions.heartbeat({"kind": "probe", "nonce": "not hex"})  # malformed: refused, recorded, acked
    with zen.db.transaction() as session:
        assert any("nonce" in r["reason"] for r in repository.list_rejections(session))


def test_a_probe_that_could_not_be_published_holds_nothing(functions, zen, publisher, clock):
    """A probe the tick could not publish (its account no longer allowed on zen-heartbeats, Pub/Sub down) is never
    heard: taken for a slow path, it would have held the sweep for good, and a job on a dead VM never come back."""
    path = _Path(functions, publisher)
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    path.tick(deliver=True)  # probes come through: the path is watched
    for _ in range(5):  # vm-a is gone; every probe's publish fails
        clock.advance(30)
        publisher.fail_next = 1
        path.tick(deliver=True)
    assert _job(zen) == ("QUEUED", 2)
    clock.advance(30)
    path.tick(deliver=True)  # and the next probe goes out
    assert path.seen and _job(zen) == ("QUEUED", 2)
