"""Several jobs per VM (issue 15) with a real agent process against the real scheduler (see
conftest.py): an 8-GPU VM of a cluster with ``max_jobs_per_vm: 2`` runs two 4-GPU jobs at once, each
on its own GPUs, while a third waits for room; a shutdown ends both attempts as PREEMPTED and
another VM reruns them."""

from __future__ import annotations

import re

import pytest

from tests.agent.conftest import shared_vms_config
from tests.agent.helpers import job_command, wait_for

SHARED = "8xa100-40gb"


@pytest.fixture
def config(project):
    return shared_vms_config(project, SHARED)


def submit_four_gpus(scheduler, job_id: str, command: list[str]) -> None:
    scheduler._publish(scheduler.config.topics.job_submitted, {
        "job_id": job_id, "user_id": "alice", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4, "command": command})


def intervals(path) -> dict[str, tuple[float, float]]:
    """``job -> (start, end)`` from the lines jobscript's ``--append`` wrote."""
    seen: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        job_id, what, at = line.split()
        seen.setdefault(job_id, {})[what] = float(at)
    return {job_id: (times["start"], times["end"]) for job_id, times in seen.items()}


def gpus_seen(message: str) -> tuple[str, str]:
    return (re.search(r"^CUDA_VISIBLE_DEVICES=(.*)$", message, re.M).group(1),
            re.search(r"^ZEN_GPU_IDS=(.*)$", message, re.M).group(1))


def test_two_four_gpu_jobs_run_at_once_on_disjoint_gpus_and_a_third_waits_for_room(scheduler, agents, tmp_path):
    runs = tmp_path / "runs.txt"
    jobs = ["four-1", "four-2", "four-3"]
    for job_id in jobs:
        submit_four_gpus(scheduler, job_id, job_command(
            "--append", str(runs), job_id, "--print-env", "CUDA_VISIBLE_DEVICES", "--print-env", "ZEN_GPU_IDS",
            "--sleep", "3"))
    for job_id in jobs:
        assert scheduler.wait_status(job_id, "QUEUED").cluster == SHARED
    agent = agents.start("vm-a", ZEN_CLUSTER=SHARED)

    # While two run, the VM's heartbeat names both.
    row = wait_for(lambda: (r := scheduler.vm("vm-a")) and r["jobs"] and len(r["jobs"]) == 2 and r, 30,
                   what="vm-a holding two jobs")
    assert row["state"] == "BUSY" and {held["attempt"] for held in row["jobs"]} == {1}
    ended = {job_id: scheduler.wait_status(job_id, "SUCCEEDED", timeout_s=40) for job_id in jobs}

    spans = intervals(runs)
    first, second, third = sorted(jobs, key=lambda j: spans[j][0])
    assert spans[second][0] < spans[first][1]  # the first two overlap ...
    assert spans[third][0] >= min(spans[first][1], spans[second][1])  # ... and the third waited for room
    held = {job_id: set(gpus_seen(ended[job_id].message)[0].split(",")) for job_id in jobs}
    assert held[first] | held[second] == {str(n) for n in range(8)} and not held[first] & held[second]
    assert all(len(ids) == 4 and gpus_seen(ended[j].message)[0] == gpus_seen(ended[j].message)[1]
               for j, ids in held.items())
    # The RUNNING intervals Zen recorded overlap too, all on the one VM.
    assert ended[second].started_at < ended[first].finished_at and {j.vm for j in ended.values()} == {"vm-a"}
    assert [status for _, status, _ in scheduler.history(third)] == [  # never claimed while the VM was full
        "PENDING", "QUEUED", "ASSIGNED", "RUNNING", "SUCCEEDED"]
    assert not agent.said("no room for the job now; giving it back")  # both slots taken: it did not even pull
    assert wait_for(lambda: (r := scheduler.vm("vm-a")) and r["state"] == "IDLE" and r, 10, what="vm-a IDLE")


def test_a_shutdown_preempts_every_running_attempt_and_another_vm_reruns_them(scheduler, agents):
    jobs = ["long-1", "long-2"]
    for job_id in jobs:
        submit_four_gpus(scheduler, job_id, job_command("--first-attempt-sleep", "120", "--sleep", "0.2"))
    agent = agents.start("vm-a", ZEN_CLUSTER=SHARED)
    for job_id in jobs:
        assert scheduler.wait_status(job_id, "RUNNING").vm == "vm-a"

    assert agent.terminate() == 0  # SIGTERM, as a VM shutdown does

    for job_id in jobs:
        assert scheduler.wait_status(job_id, "QUEUED", timeout_s=15).attempt == 2
        history = scheduler.history(job_id)
        assert (1, "LOST", "VM vm-a was preempted (no attempt spent)") in history and (2, "QUEUED", "requeued as attempt 2") in history
    # Its last VM heartbeat lists the jobs it holds (none by now), as its others do: one that lists no jobs is taken
    # for a VM running one job at a time, and an attempt ending after it (a report read late, the sweep's) was billed
    # the whole VM (tests/test_shared_vm_stopping_billed_its_share.py).
    row = wait_for(lambda: (r := scheduler.vm("vm-a")) and r["state"] == "STOPPING" and r, 15, what="vm-a STOPPING")
    assert row["jobs"] == [], f"vm-a's STOPPING lists {row['jobs']!r}: Zen takes it for a VM running one job at a time"
    [sent] = agent.said("heartbeat sent", vm_state="STOPPING")
    assert sent.get("jobs") == 0, f"the STOPPING vm-a sent lists {sent.get('jobs')!r} jobs"  # (the message it sent)
    agents.start("vm-b", ZEN_CLUSTER=SHARED)
    for job_id in jobs:
        done = scheduler.wait_status(job_id, "SUCCEEDED", timeout_s=30)
        assert (done.attempt, done.vm) == (2, "vm-b")
