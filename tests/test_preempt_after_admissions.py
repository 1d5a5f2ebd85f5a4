"""A pass that admits jobs and then preempts for a head that does not fit (zen.jobs.queueing): the check that the
next pass, with the victims gone, admits the preemptor reads each queue's line past the jobs this pass admitted
(still PENDING to its transaction), as many as that pass will read. It read as many as the freed GPUs fit and then
dropped those admitted, so a line missed the jobs the next pass puts first: the preemptor of the first test, or a
`never` queue's job in the second. Through the functions against a real Postgres, one job per VM (a job holds its
VM's 4 GPUs), after a quota raised by the operator."""

from __future__ import annotations

from tests.messages import job_request
from tests.test_queues import CLUSTER, statuses, with_queues
from tests.test_queues_preemption_order import preempted


def research(quota, preemption):
    return [{"name": "research", "quota": {CLUSTER: quota}, "users": ["alice"], "preemption": preemption}]


def test_a_pass_that_admits_two_jobs_preempts_for_the_third_in_the_same_pass(
        config, db, publisher, clock, db_url, monkeypatch):
    """The quota goes from 8 to 16 while h1, h2, h3 (priority 9) wait behind low1 and low2 (priority 0): the
    tick's pass admits h1 and h2 into the 8 GPUs raised and preempts low2 for h3. The check read the line as
    many jobs as the freed GPUs fit (one) and then left out the two it had just admitted: h3 was not in it, so
    low2 was kept and h3 waited a tick more for a preemption that was due."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen = Zen(with_queues(config, research(8, "never")), db, publisher, clock)
    fn = FunctionsInvoker(zen)
    for job_id, priority in (("low1", 0), ("low2", 0), ("h1", 9), ("h2", 9), ("h3", 9)):
        fn.submit(job_request(job_id, priority=priority))
        clock.advance(1)
    assert statuses(zen, "low1", "low2", "h1", "h2", "h3") == ["QUEUED", "QUEUED", "PENDING", "PENDING", "PENDING"]

    raised = Zen(with_queues(config, research(16, "lower-priority")), db, publisher, clock)
    FunctionsInvoker(raised).tick()

    assert statuses(raised, "h1", "h2", "h3", "low1", "low2") == ["QUEUED", "QUEUED", "QUEUED", "QUEUED", "PENDING"]
    assert preempted(raised, "low1", "low2") == ["low2"]


def lab(team_x):
    return [{"name": "team-x", "cohort": "lab", "quota": {CLUSTER: team_x}, "users": ["bob"]},
            {"name": "team-q", "cohort": "lab", "quota": {CLUSTER: 12}, "users": ["alice"], "preemption": "lower-priority"},
            {"name": "team-c", "cohort": "lab", "quota": {CLUSTER: 4}, "users": ["carol"]}]


def test_a_pass_that_admits_two_jobs_stops_no_job_for_a_preemptor_the_next_one_still_leaves_waiting(
        config, db, publisher, clock, db_url, monkeypatch):
    """team-c borrows team-x's idle quota; team-x's x1..x3 (priority 20, a `never` queue's) and team-q's p (priority
    10, within its quota) wait, p behind x's jobs, which go first. team-x's quota goes from 8 to 16: the tick's pass
    admits x1 and x2, and x3 waits for the full cohort. p's check left x3 out of team-x's line (it read one job and
    dropped the two admitted), so l2 was stopped, its GPUs went to x3 in the next pass, and l1 was stopped for p
    too: two priority-0 jobs preempted, one of them for a job of a queue that never preempts."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen = Zen(with_queues(config, lab(8)), db, publisher, clock)
    fn = FunctionsInvoker(zen)
    jobs = [job_request(f"l{n}", priority=0) for n in (1, 2)]  # team-q: 8 of its 12
    jobs += [job_request(f"c{n}", user_id="carol") for n in range(4)]  # team-c: 16, 12 borrowed: 24 of 24
    jobs += [job_request(f"x{n}", user_id="bob", priority=20) for n in (1, 2, 3)] + [job_request("p", priority=10)]
    for job in jobs:
        fn.submit(job)
        clock.advance(1)
    assert statuses(zen, "l1", "l2", "c3", "x1", "x3", "p") == ["QUEUED"] * 3 + ["PENDING"] * 3

    raised = Zen(with_queues(config, lab(16)), db, publisher, clock)
    FunctionsInvoker(raised).tick()

    assert statuses(raised, "x1", "x2", "x3", "p") == ["QUEUED", "QUEUED", "PENDING", "PENDING"]
    assert preempted(raised, "l1", "l2") == []
