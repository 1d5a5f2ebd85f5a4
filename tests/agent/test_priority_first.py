"""A free VM runs the queued job of highest priority first, with the real agent (zen.jobs.claims.outranked): the
start it pulls first is an older job's of priority 0; its claim is refused ``outranked``, it gives that start back,
the job of priority 5 is offered to it, and it takes that offer before it pulls again
(``zen.agent.backoff.ClaimBackoff.outranked``)."""

from __future__ import annotations

from tests.agent.helpers import job_command


def test_a_vm_runs_the_job_of_higher_priority_before_older_ones(scheduler, agents):
    for job_id, priority in (("low-1", 0), ("low-2", 0), ("high", 5)):
        scheduler.submit(job_id, job_command("--sleep", "0.2"), priority=priority)
        scheduler.wait_status(job_id, "QUEUED")
    agent = agents.start("vm-a")

    jobs = {job_id: scheduler.wait_status(job_id, "SUCCEEDED", timeout_s=60) for job_id in ("high", "low-1", "low-2")}
    assert all(job.vm == "vm-a" and job.attempt == 1 for job in jobs.values())
    order = sorted(jobs, key=lambda job_id: jobs[job_id].started_at)
    assert order[0] == "high", order  # the older jobs after it, in whatever order Pub/Sub delivered them again
    given_back = agent.said("claim outranked; start given back")  # for another VM: not published again
    assert given_back and {line["job_id"] for line in given_back} <= {"low-1", "low-2"}, given_back
    assert agent.said("claim outranked; waiting for the start offered")
    assert agent.said("start offered to this VM", job_id="high")
    assert not agent.said("start offer dropped; the tick widens its start")
