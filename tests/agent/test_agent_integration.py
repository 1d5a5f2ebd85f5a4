"""Agents as real processes against the real scheduler: the Pub/Sub stand-in, the functions under
functions-framework fed by the event bridge, and Postgres. See conftest.py for the wiring."""

from __future__ import annotations

import time
from datetime import timedelta

from tests.agent.helpers import alive, job_command, read_pid, wait_for


def statuses(history, attempt=None):
    return [status for number, status, _ in history if attempt is None or number == attempt]


def test_a_job_runs_to_succeeded_with_its_exit_code_and_output_tail(scheduler, agents):
    agent = agents.start("vm-a")
    scheduler.submit("ok-1", job_command("--print", "hello from the job", "--sleep", "1.2"))

    job = scheduler.wait_status("ok-1", "SUCCEEDED")

    assert (job.exit_code, job.attempt, job.vm, job.region, job.zone) == (0, 1, "vm-a", "us-central1", "us-central1-a")
    assert "hello from the job" in job.message and job.message.endswith("exiting with 0\n")
    assert statuses(scheduler.history("ok-1")) == ["PENDING", "QUEUED", "ASSIGNED", "RUNNING", "SUCCEEDED"]
    assert job.last_seq > 1_600_000_000_000  # the final report's: job reports send epoch milliseconds too
    vm = wait_for(lambda: (row := scheduler.vm("vm-a")) and row["state"] == "IDLE" and row, 10, what="vm IDLE")
    assert vm["cluster"] == "4xa100-40gb" and vm["last_seq"] > 1_600_000_000_000  # epoch milliseconds
    assert agent.said("job ended", job_id="ok-1", status="SUCCEEDED", vm="vm-a", cluster="4xa100-40gb",
                      region="us-central1")


def test_a_failing_command_ends_failed_with_its_exit_code(scheduler, agents):
    agents.start("vm-a")
    scheduler.submit("bad-1", job_command("--print", "boom: out of memory", "--exit", "3"))

    job = scheduler.wait_status("bad-1", "FAILED")

    assert job.exit_code == 3 and "boom: out of memory" in job.message and job.attempt == 1
    assert statuses(scheduler.history("bad-1"))[-1] == "FAILED"


def test_a_stop_ends_cancelled_within_seconds_and_the_process_group_is_gone(scheduler, agents, tmp_path):
    agent = agents.start("vm-a")
    scheduler.submit("long-1", job_command("--pidfile", str(tmp_path / "pid"), "--child-pidfile",
                                           str(tmp_path / "child"), "--sleep", "120"))
    scheduler.wait_status("long-1", "RUNNING")
    pid, child = read_pid(tmp_path / "pid"), read_pid(tmp_path / "child")
    assert alive(pid) and alive(child)

    began = time.monotonic()
    scheduler.stop("long-1", "wrong learning rate")
    job = scheduler.wait_status("long-1", "CANCELLED", timeout_s=10)

    assert time.monotonic() - began < 5
    assert not alive(pid) and wait_for(lambda: not alive(child), 5, what="child gone")
    assert statuses(scheduler.history("long-1"))[-2:] == ["STOPPING", "CANCELLED"]
    assert job.exit_code == 143 and "stopped (wrong learning rate)" in job.message
    assert agent.process.poll() is None  # the VM stays, ready for the next job
    wait_for(lambda: scheduler.vm("vm-a")["state"] == "IDLE", 10, what="vm IDLE after the stop")


def test_two_agents_racing_for_one_job_run_it_exactly_once(scheduler, agents, publisher, pubsub_clients, tmp_path):
    runs = tmp_path / "runs.txt"
    scheduler.submit("race-1", job_command("--append", str(runs), "race-1", "--sleep", "0.5"))
    # Pub/Sub delivers at least once: a second copy of the start message is in the subscription too.
    [start] = wait_for(lambda: publisher.on("zen-job-start"), 10, what="start message published")
    publisher_client = pubsub_clients[0]
    topic = publisher_client.topic_path(scheduler.config.project, "zen-job-start")
    publisher_client.publish(topic, start.data, **start.attributes).result(timeout=10)

    first, second = agents.start("vm-a"), agents.start("vm-b")
    job = scheduler.wait_status("race-1", "SUCCEEDED")
    # The other copy is refused by Zen if the other VM claims it, or dropped unclaimed by the VM that ran the
    # job if that VM pulls it after the run (which VM gets it is Pub/Sub's choice).
    dropped = wait_for(lambda: [("refused", line) for agent in (first, second)
                                for line in agent.said("claim refused; start message dropped")] +
                       [("ran", line) for agent in (first, second) for copy_of in ("holds", "ran")
                        for line in agent.said(f"another copy of a start this VM {copy_of}; dropped")],
                       30, what="the other copy refused or dropped")

    assert [line.split()[:2] for line in runs.read_text().splitlines()] == [["race-1", "start"], ["race-1", "end"]]
    confirmed = first.said("claim confirmed") + second.said("claim confirmed")
    assert [line["vm"] for line in confirmed] == [job.vm]
    [(how, line)] = dropped
    assert line["action"] == "RELEASE" if how == "refused" else line["vm"] == job.vm


def test_an_agent_killed_mid_job_is_lost_and_another_agent_reruns_it(scheduler, agents, tmp_path):
    doomed = agents.start("vm-a")
    scheduler.submit("lost-1", job_command("--pidfile", str(tmp_path / "pid"), "--first-attempt-sleep", "120"))
    scheduler.wait_status("lost-1", "RUNNING")
    pid = read_pid(tmp_path / "pid")

    doomed.kill()  # SIGKILL: no goodbye, no PREEMPTED
    wait_for(lambda: not alive(pid), 5, what="the job died with its agent")
    rescuer = agents.start("vm-b")

    def swept_and_requeued():
        scheduler.sweep()
        return scheduler.job("lost-1").attempt == 2

    wait_for(swept_and_requeued, 30, 0.3, what="lost and requeued")  # the tests' heartbeat timeout: 10 s
    job = scheduler.wait_status("lost-1", "SUCCEEDED")

    assert (job.attempt, job.vm, job.exit_code) == (2, "vm-b", 0) and "attempt=2" in job.message
    history = scheduler.history("lost-1")
    [(_, _, lost_reason)] = [entry for entry in history if entry[1] == "LOST"]
    assert statuses(history, 1)[-1] == "LOST" and "no heartbeat from vm-a" in lost_reason
    assert statuses(history, 2) == ["QUEUED", "ASSIGNED", "RUNNING", "SUCCEEDED"]
    assert rescuer.said("job ended", job_id="lost-1", attempt=2)


def test_one_agent_runs_three_queued_jobs_back_to_back(scheduler, agents, tmp_path):
    runs = tmp_path / "runs.txt"
    for n in (1, 2, 3):
        scheduler.submit(f"batch-{n}", job_command("--append", str(runs), f"batch-{n}", "--sleep", "0.3",
                                                   "--print-ppid"))
    for n in (1, 2, 3):
        scheduler.wait_status(f"batch-{n}", "QUEUED")
    agent = agents.start("vm-a")

    jobs = [scheduler.wait_status(f"batch-{n}", "SUCCEEDED") for n in (1, 2, 3)]

    assert {job.vm for job in jobs} == {"vm-a"}
    assert all(f"ppid={agent.pid}" in job.message for job in jobs)  # one agent process ran them all
    assert agent.process.poll() is None and len(agent.said("agent started")) == 1
    events = [line.split() for line in runs.read_text().splitlines()]
    assert [kind for _, kind, _ in events] == ["start", "end"] * 3  # never two at once
    assert all(events[i][0] == events[i + 1][0] for i in range(0, 6, 2))


def test_max_runtime_is_enforced_and_not_retried(scheduler, agents, tmp_path):
    agents.start("vm-a")
    scheduler.submit("slow-1", job_command("--pidfile", str(tmp_path / "pid"), "--sleep", "120"), max_runtime_s=1,
                     max_retries=2, retry_backoff_s=0)  # any non-zero code retried, but not the agent's kill

    job = scheduler.wait_status("slow-1", "FAILED", timeout_s=15)

    assert "killed after exceeding max_runtime_s=1" in job.message and job.exit_code == 143
    assert (job.attempt, job.retries) == (1, 0)
    assert (job.finished_at - job.started_at).total_seconds() < 5
    assert not alive(read_pid(tmp_path / "pid"))


def test_sigterm_reports_preempted_requeues_at_once_and_cleans_up(scheduler, agents, pubsub_clients, tmp_path):
    agent = agents.start("vm-a")
    scheduler.submit("pre-1", job_command("--pidfile", str(tmp_path / "pid"), "--first-attempt-sleep", "120"))
    scheduler.wait_status("pre-1", "RUNNING")
    pid = read_pid(tmp_path / "pid")

    assert agent.terminate() == 0

    assert not alive(pid)
    job = wait_for(lambda: (j := scheduler.job("pre-1")).attempt == 2 and j, 10, what="requeued without a sweep")
    assert job.status.value == "QUEUED"
    [(lost_attempt, _, lost_reason)] = [entry for entry in scheduler.history("pre-1") if entry[1] == "LOST"]
    assert lost_attempt == 1 and "was preempted" in lost_reason
    wait_for(lambda: scheduler.vm("vm-a")["state"] == "STOPPING", 10, what="vm STOPPING")
    # Its control subscription is left to expire after a day (the agent's role cannot delete it).
    subscriber = pubsub_clients[1]
    path = subscriber.subscription_path(scheduler.config.project, scheduler.config.vm_control_subscription("vm-a"))
    assert subscriber.get_subscription(subscription=path).expiration_policy.ttl == timedelta(days=1)
