"""A host-process job's task limit, kept by its supervisor (``zen.agent.tasklimit``, ``zen.agent.launch``):
a job that forks past it is killed with everything it forked, and says why; one within it runs to its end.
Both mechanisms, a cgroup (where this machine lets the test make one) and counting. Real processes: each
job forks ``sleep`` children, capped at a few hundred, so a limit that failed cannot hurt the machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zen.agent import tasklimit
from zen.agent.container import Sandbox, Shape, slot_limits
from zen.agent.runner import LAUNCH, JobSpec, RunningJob

FORKS = """
import os, subprocess, sys, time
record = open(sys.argv[2], "a")
started = 0
for _ in range(int(sys.argv[1])):
    try:
        child = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        time.sleep(0.01)  # refused (a cgroup's limit): a fork bomb tries again
        continue
    started += 1
    print(child.pid, file=record, flush=True)
if sys.argv[3] == "daemon":  # double-forked into a session of its own (no longer the job's), it forks one more
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            print(os.getpid(), file=record, flush=True)
            time.sleep(0.3)
            print(subprocess.Popen(["sleep", "60"]).pid, file=record, flush=True)
            time.sleep(60)
        os._exit(0)
    os.waitpid(middle, 0)
print("started", started, flush=True)
time.sleep(float(sys.argv[4]))
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _supervised(by: str, limit: int, *job_args: str) -> subprocess.CompletedProcess:
    """launch.py as the runner starts it (a session of its own), with only a task limit."""
    argv = [sys.executable, "-I", str(LAUNCH), str(os.getpid()), "--tasks", str(limit), by, "--",
            sys.executable, "-c", FORKS, *job_args]
    return subprocess.run(argv, start_new_session=True, capture_output=True, text=True, timeout=60)


def _cgroup_possible() -> bool:
    """Whether a supervisor here gets a cgroup (asked in a process of its own: without one, a TaskLimit
    makes its process a child subreaper)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from zen.agent.tasklimit import TaskLimit; "
            "limit = TaskLimit(10); print(limit.group is not None); limit.close()")
    shared = str(Path(tasklimit.__file__).parents[2])
    return subprocess.run([sys.executable, "-c", code, shared], capture_output=True, text=True,
                          timeout=30).stdout.strip() == "True"


@pytest.mark.parametrize("by", ["any", "poll"])
def test_a_job_forking_past_its_limit_is_killed_with_all_it_forked(by, tmp_path):
    record = tmp_path / "pids"
    began = time.monotonic()
    done = _supervised(by, 40, "400", str(record), "daemon", "30")
    took = time.monotonic() - began
    time.sleep(0.2)
    assert done.returncode == 137, done.stderr
    assert took < 10, took  # not the job's 30 s
    assert "zen: stopped: the job forked more than 40 processes (its limit: 40 processes and threads" in done.stderr
    forked = _pids(record)
    assert len(forked) >= 30  # it did fork (the limit is on what runs at once) ...
    assert len(forked) < 400  # ... and was stopped well before it was done
    assert not [pid for pid in forked if _alive(pid)]  # nothing it forked is left running


def test_counting_sees_a_daemonized_grandchild(tmp_path):
    """Double-forked into a session of its own, a process is neither the job's child nor in its session:
    the supervisor, a child subreaper, still has it among its descendants, and counts it."""
    record = tmp_path / "pids"
    done = _supervised("poll", 4, "2", str(record), "daemon", "30")
    time.sleep(0.2)
    assert done.returncode == 137, done.stderr  # the job, its 2 sleeps, the daemon and its sleep: 5 > 4
    assert "5 counted" in done.stderr, done.stderr
    forked = _pids(record)
    # The daemon's sleep may be killed (it made the fifth task) before the daemon writes its pid down.
    assert len(forked) in (3, 4) and not [pid for pid in forked if _alive(pid)], forked


@pytest.mark.parametrize("by", ["any", "poll"])
def test_a_job_within_its_limit_runs_to_its_end(by, tmp_path):
    done = _supervised(by, 40, "20", str(tmp_path / "pids"), "-", "0.5")
    assert done.returncode == 0, done.stderr
    assert "started 20" in done.stdout and "zen: stopped" not in done.stderr
    time.sleep(0.2)
    assert not [pid for pid in _pids(tmp_path / "pids") if _alive(pid)]  # left running: gone with it


@pytest.mark.parametrize("by", ["any", "poll"])
def test_what_the_job_left_running_goes_with_it_a_daemon_too(by, tmp_path):
    """The agent kills the job's process group when it ends; a daemon left it (a session of its own):
    the supervisor kills it, from its cgroup or as its descendant."""
    done = _supervised(by, 40, "1", str(tmp_path / "pids"), "daemon", "1")
    forked = _pids(tmp_path / "pids")
    time.sleep(0.2)
    assert done.returncode == 0, done.stderr
    assert len(forked) == 3 and not [pid for pid in forked if _alive(pid)]


def test_a_cgroup_left_by_a_supervisor_gone_is_removed_by_the_next():
    if not _cgroup_possible():
        pytest.skip("no writable pids cgroup here (not root, no delegated subtree): counting is used")
    dead = subprocess.Popen(["true"])
    dead.wait()
    first = tasklimit.TaskLimit(10)  # (a cgroup: this process is no subreaper)
    first.close()
    parent = os.path.dirname(first.group or "")
    stale = os.path.join(parent, f"zen-job-{dead.pid}")
    os.mkdir(stale)
    limit = tasklimit.TaskLimit(10)
    limit.close()
    assert not os.path.exists(stale) and not os.path.exists(limit.group)


def test_where_a_cgroup_can_be_made_it_is_used_and_removed_after():
    if not _cgroup_possible():
        pytest.skip("no writable pids cgroup here (not root, no delegated subtree): counting is used")
    limit = tasklimit.TaskLimit(10)
    assert limit.mechanism == "cgroup" and Path(limit.group, "pids.max").read_text().strip() == "10"
    limit.close()
    assert not os.path.exists(limit.group)


def test_the_runner_gives_a_host_process_its_slots_task_limit_and_reports_why_it_was_stopped(tmp_path):
    shape = Shape(memory_bytes=8 << 30, cpus=4, gpus=2, max_jobs=2, tasks_per_job=30)
    spec = JobSpec(job_id="forker", attempt=1, stop_grace_s=0.5, gpu_ids=(1,), sandbox=Sandbox(shape=shape),
                   command=[sys.executable, "-c", FORKS, "300", str(tmp_path / "pids"), "-", "30"])
    job = RunningJob.start(spec, local=True, lease_s=60)
    assert job.process.args[job.process.args.index("--tasks") + 1] == "30"
    began = time.monotonic()
    while job.poll() is None and time.monotonic() - began < 20:
        time.sleep(0.05)
    outcome = job.outcome()
    assert outcome.exit_code == 137
    assert job.over_tasks() is not None and job.over_tasks().startswith("zen: stopped: the job forked more than 30 ")
    assert not job.fenced()
    assert "zen: stopped: the job forked more than 30 processes" in outcome.tail


def test_the_limit_is_the_containers_pids_limit_for_the_same_slot():
    shape = Shape(memory_bytes=8 << 30, cpus=4, gpus=2, max_jobs=2, tasks=32768)
    assert slot_limits(shape, (0,)).tasks == 12288  # 75 % of the kernel's, halved: one GPU of two
    assert slot_limits(Shape(memory_bytes=8 << 30, cpus=4, tasks_per_job=500), None).tasks == 500


def test_own_cgroups_reads_both_hierarchies(tmp_path):
    (tmp_path / "mountinfo").write_text(
        "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    (tmp_path / "cgroup").write_text("8:pids:/user.slice\n4:memory:/x\n0::/user.slice/session-1.scope\n")
    assert tasklimit.own_cgroups(str(tmp_path)) == [("2", "/sys/fs/cgroup/unified/user.slice/session-1.scope"),
                                                     ("1", "/sys/fs/cgroup/pids/user.slice")]


def test_both_ways_of_counting_find_the_same_processes():
    """Down the tree from the supervisor (``/proc/PID/task/TID/children``), or, on a kernel without it, a
    walk of every process: the same tasks, children, a grandchild, and a child's second thread."""
    code = """
import os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from zen.agent.tasklimit import TaskLimit
limit = TaskLimit(100, "poll")
quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
subprocess.Popen(["sleep", "30"], **quiet)
subprocess.Popen(["sh", "-c", "sleep 30 & wait"], **quiet)
subprocess.Popen([sys.executable, "-c", "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); "
                  "time.sleep(30)"], **quiet)
time.sleep(0.5)
down, walked = limit._tasks(), limit._walk_all(False, False)
print(sorted(down.items()) == sorted(walked.items()), len(down), sum(down.values()), flush=True)
os.killpg(0, 9)  # all of it, this process too
"""
    shared = str(Path(tasklimit.__file__).parents[2])
    done = subprocess.run([sys.executable, "-c", code, shared], start_new_session=True, capture_output=True,
                          text=True, timeout=30)
    assert done.stdout.split() == ["True", "4", "5"], (done.stdout, done.stderr)
