"""Which preemption a pass makes, and for whom what it frees is kept (zen.jobs.queueing): through the functions
against a real Postgres. One victim where one frees enough, a preemption made when the next pass would admit
its preemptor (by the shares that pass sees), and victims found in every borrowing queue of a cohort."""

from __future__ import annotations

from tests.messages import job_request
from tests.test_queues import CLUSTER, run_until_running, statuses, stop_answer, with_queues
from tests.test_queues_preemption import a100s, halves_config
from zen.store import repository


def functions(config, db, publisher, clock, db_url, monkeypatch, queues, **queueing):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    shaped = with_queues(config, queues, queueing=queueing) if queueing else halves_config(config, queues)
    zen = Zen(shaped, db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def preempted(zen, *job_ids):
    with zen.db.transaction() as session:
        return [job_id for job_id in job_ids
                if any(e["reason"].startswith("preempted") for e in repository.job_history(session, job_id))]


def test_what_a_preemption_frees_is_kept_for_its_preemptor_so_one_victim_is_enough(
        config, db, publisher, clock, db_url, monkeypatch):
    """A full 14-GPU cohort; carol stops c3 (2 GPUs on their way back) while team-a's p (4 GPUs, priority 9)
    and team-b's b1 (2 GPUs, within its quota, a `never` queue's) wait. c3's end frees 2: p preempts l2 (2 more),
    but the same pass admitted b1 into the 2 free, so p was short again and the next pass preempted l1 too: two
    jobs stopped where one was enough. The 2 free are now kept for p; b1 waits."""
    queues = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 8}, "users": ["alice"], "preemption": "lower-priority"},
              {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]},
              {"name": "team-c", "cohort": "lab", "quota": {CLUSTER: 2}, "users": ["carol"]}]
    zen, fn = functions(config, db, publisher, clock, db_url, monkeypatch, queues)
    jobs = [a100s("l1", 2, 0), a100s("l2", 2, 0), {**a100s("b0", 2, 0), "user_id": "bob"}]
    jobs += [{**a100s(f"c{n}", 2, 0), "user_id": "carol"} for n in range(4)]
    for job in jobs:  # team-a 4 of its 8, team-b 2 of its 4, team-c 8 (6 borrowed): 14 of 14
        fn.submit(job)
        clock.advance(1)
    run_until_running(fn, "c3", "vm-c3")
    fn.stop({"job_id": "c3"})
    fn.submit({**a100s("b1", 2, 0), "user_id": "bob"})
    clock.advance(1)
    fn.submit(a100s("p", 4, 9))
    clock.advance(1)
    assert statuses(zen, "l1", "l2", "c3", "b1", "p") == ["QUEUED", "QUEUED", "STOPPING", "PENDING", "PENDING"]

    fn.heartbeat(stop_answer("c3", "vm-c3"))

    assert statuses(zen, "p", "b1") == ["QUEUED", "PENDING"]
    assert preempted(zen, "l1", "l2") == ["l2"]


def test_a_preemption_is_made_when_its_preemptor_goes_first_once_the_victims_are_gone(
        config, db, publisher, clock, db_url, monkeypatch):
    """team-a's p (priority 5) may preempt its queue's priority-0 jobs; team-b's h (priority 5, a `never`
    queue's) waits too. team-a's share is the larger while it holds its victims, so h came first in this pass and
    the preemption was dropped as one whose GPUs h would take; but without l2 team-a's share is the smaller and
    the next pass admits p. p waited behind priority-0 jobs for as long as they ran (hours here)."""
    queues = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"], "preemption": "lower-priority"},
              {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]},
              {"name": "team-c", "cohort": "lab", "quota": {CLUSTER: 8}, "users": ["carol"]}]
    zen, fn = functions(config, db, publisher, clock, db_url, monkeypatch, queues, usage_half_life_s=3600)
    for n in (1, 2):  # team-a: 8 GPUs (4 borrowed from idle team-c), priority 0
        fn.submit(job_request(f"l{n}", priority=0))
    clock.advance(1000)
    for n in (1, 2):  # team-b: 8 GPUs (4 borrowed), priority 5: the cohort is full
        fn.submit(job_request(f"b{n}", user_id="bob", priority=5))
    clock.advance(10)
    fn.submit(job_request("h", user_id="bob", priority=5))
    clock.advance(10)
    fn.submit(job_request("p", priority=5))
    for _ in range(4):
        clock.advance(1800)
        fn.tick()
    assert statuses(zen, "p", "h") == ["QUEUED", "PENDING"]
    assert preempted(zen, "l1", "l2") == ["l2"]


def test_reclaim_takes_back_what_a_second_borrowing_queue_holds_behind_fifty_cheaper_jobs(
        config, db, publisher, clock, db_url, monkeypatch):
    """team-a lent its 4 GPUs: team-b borrows 2 with 51 jobs, team-c 2 with two. The 50 cheapest admitted jobs of
    the borrowers were read, all team-b's, and one was all team-b could give: team-c's never came, and p, within
    its own quota, waited for as long as they ran. Each queue now offers its own 50 cheapest."""
    queues = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"], "preemption": "reclaim-borrowed"},
              {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 100}, "users": ["bob"]},
              {"name": "team-c", "cohort": "lab", "quota": {CLUSTER: 2}, "users": ["carol"]}]
    zen, fn = functions(config, db, publisher, clock, db_url, monkeypatch, queues)
    for n in range(51):
        fn.submit({**a100s(f"b{n}", 2, 0), "user_id": "bob"})
        clock.advance(1)
    for n in range(2):
        fn.submit({**a100s(f"c{n}", 2, 1), "user_id": "carol"})
        clock.advance(1)
    assert statuses(zen, "b50", "c1") == ["QUEUED", "QUEUED"]  # the cohort: 106 of 106
    fn.submit(a100s("p", 4, 0))
    assert statuses(zen, "p") == ["QUEUED"]
    assert preempted(zen, "b50", "c1") == ["b50", "c1"]


def test_a_preemption_is_not_made_for_a_head_that_jobs_the_pass_did_not_read_go_before(
        config, db, publisher, clock, db_url, monkeypatch):
    """The next pass was foretold from the jobs this pass read (one a queue, the cohort full), but with the
    victim's 4 GPUs free it reads more: team-r's second job took the rest, and a second victim was stopped for p.
    Now each line is read as that pass will read it, and no victim is stopped for p (team-r's jobs go first)."""
    queues = [{"name": "team-a", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["alice"], "preemption": "reclaim-borrowed"},
              {"name": "team-r", "cohort": "lab", "quota": {CLUSTER: 8}, "users": ["rita"]},
              {"name": "team-b", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["bob"]}]
    zen, fn = functions(config, db, publisher, clock, db_url, monkeypatch, queues)
    for n in range(4):  # team-b: 16 of the cohort's 16 (12 borrowed), 4 GPUs a job
        fn.submit({**a100s(f"b{n}", 4, 0), "user_id": "bob"})
        clock.advance(1)
    for n in range(2):  # team-r: within its quota, higher priority, waits for what it lent (a `never` queue)
        fn.submit({**a100s(f"r{n}", 2, 9), "user_id": "rita"})
        clock.advance(1)
    assert statuses(zen, "b3", "r0", "r1") == ["QUEUED", "PENDING", "PENDING"]

    fn.submit(a100s("p", 2, 0))  # within team-a's quota: it may reclaim

    assert preempted(zen, "b0", "b1", "b2", "b3") == [] and statuses(zen, "p", "r0", "r1") == ["PENDING"] * 3
