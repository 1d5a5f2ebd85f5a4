"""An agent with a per-day pull limit as a real process against the real scheduler (see conftest.py):
it runs its jobs, reports its VM RETIRED, and leaves the rest of the queue to other VMs."""

from __future__ import annotations

import time

from tests.agent.helpers import job_command, wait_for


def test_an_agent_limited_to_two_jobs_a_day_runs_two_retires_and_the_third_stays_queued(scheduler, agents, tmp_path):
    jobs = [f"day-{n}" for n in (1, 2, 3)]
    for job_id in jobs:
        scheduler.submit(job_id, job_command("--append", str(tmp_path / "runs.txt"), job_id, "--sleep", "0.3"))
    for job_id in jobs:
        scheduler.wait_status(job_id, "QUEUED")
    agent = agents.start("vm-a", ZEN_AGENT_MAX_JOBS_PER_DAY="2")

    wait_for(lambda: (row := scheduler.vm("vm-a")) and row["state"] == "RETIRED", 30, what="vm-a RETIRED")
    time.sleep(2)  # 20 of its poll periods: time enough to pull the third, had it been allowed to

    ended = {job_id: scheduler.job(job_id) for job_id in jobs}
    assert sorted(job.status.value for job in ended.values()) == ["QUEUED", "SUCCEEDED", "SUCCEEDED"]
    assert {job.vm for job in ended.values() if job.status.value == "SUCCEEDED"} == {"vm-a"}
    [waiting] = [job_id for job_id, job in ended.items() if job.status.value == "QUEUED"]
    assert [status for _, status, _ in scheduler.history(waiting)] == ["PENDING", "QUEUED"]  # never claimed
    [retired] = agent.said("taking no more jobs", vm="vm-a")
    assert retired["reason"] == "2 jobs in 24 h (limit 2)"
    assert agent.process.poll() is None  # alive, waiting to be deleted
    assert len((tmp_path / "runs.txt").read_text().splitlines()) == 4  # two jobs, start and end each

    # Another VM takes the job left in the queue.
    agents.start("vm-b")
    assert scheduler.wait_status(waiting, "SUCCEEDED").vm == "vm-b"
