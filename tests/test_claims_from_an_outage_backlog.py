"""Claims made while Zen was down: every agent that pulled a queued job's start during the outage claimed it, got
no answer, and gave the start back; over a long outage with many jobs queued, a VM gives back far more than the
16 attempts its VM heartbeats can name. A claim Pub/Sub published longer ago than any agent waits for its answer
(``zen.jobs.claims.STALE_CLAIM_S``) is refused: from the backlog, it won an attempt its VM had dropped long since,
the job ASSIGNED to a VM that did not run it until the lost-job sweep spent its only attempt (FAILED, never run)."""

from __future__ import annotations

from tests.messages import job_request
from zen.store import repository


def vm_hb(vm, seq, at, given_back=()):
    return {"kind": "vm", "vm": vm, "cluster": "4xa100-40gb", "region": "us-central1", "zone": "us-central1-a",
            "state": "IDLE", "seq": seq, "sent_at": at.isoformat(),
            **({"given_back": [{"job_id": j, "attempt": 1} for j in given_back]} if given_back else {})}


def claim(job_id, vm, seq, at):
    return {"job_id": job_id, "attempt": 1, "vm": vm, "region": "us-central1", "zone": "us-central1-a",
            "status": "CLAIMED", "seq": seq, "sent_at": at.isoformat()}


def _job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def test_a_claim_from_the_outage_backlog_does_not_fail_a_job_that_never_ran(zen, functions, clock):
    fn = functions
    ms = lambda: int(clock().timestamp() * 1000)  # noqa: E731 - agents' epoch-millisecond seqs
    for _ in range(5):
        fn.tick()
        clock.advance(60)
    others = [f"o{i}" for i in range(20)]
    fn.submit(job_request("j", max_attempts=1))
    for other in others:
        fn.submit(job_request(other))
    fn.heartbeat(vm_hb("vm-y", ms(), clock()))
    fn.tick()
    # The outage: vm-y claims j, no answer, gives it back; then claims and gives back the 20 others, one a minute.
    backlog = []
    clock.advance(30)
    backlog.append(claim("j", "vm-y", ms(), clock()))
    published = clock()  # when Pub/Sub took j's claim
    clock.advance(60)
    backlog.append(vm_hb("vm-y", ms(), clock(), ["j"]))
    dropped = ["j"]
    for other in others:
        clock.advance(5)
        backlog.append(claim(other, "vm-y", ms(), clock()))
        clock.advance(60)
        dropped.insert(0, other)
        backlog.append(vm_hb("vm-y", ms(), clock(), dropped[:16]))
    clock.advance(600)
    # Zen is back: the first tick, then the backlog (vm-y's latest VM heartbeat came first, j's claim after)
    fn.tick()
    fn.heartbeat(backlog[-1])
    fn.heartbeat(backlog[0], publish_time=published)  # j's claim, sent an hour and more ago
    assert _job(zen, "j").status.value == "QUEUED"
    for _ in range(6):  # vm-y idle, heard every minute, naming what it gave back lately (not j any more)
        clock.advance(60)
        fn.heartbeat(vm_hb("vm-y", ms(), clock(), dropped[:16]))
        fn.tick()
    job = _job(zen, "j")
    with zen.db.transaction() as session:
        history = [(r["to_status"], r["reason"]) for r in repository.job_history(session, "j")]
    assert job.status.value == "QUEUED" and job.attempt == 1, history


def test_a_claim_published_within_an_agents_wait_wins(zen, functions, clock):
    functions.submit(job_request("k"))
    published = clock()
    clock.advance(20)  # delivered 20 s after Pub/Sub took it: its agent still waits for the answer
    functions.heartbeat(claim("k", "vm-z", int(published.timestamp() * 1000), published), publish_time=published)
    assert (_job(zen, "k").status.value, _job(zen, "k").vm) == ("ASSIGNED", "vm-z")
