"""Job output end to end: real agents (``python -m zen.agent``) ship it to the local sink while the
real scheduler (functions under functions-framework, the Pub/Sub stand-in, Postgres) runs the job;
``zen logs`` and ``zen submit --wait`` are driven as a user runs them, as subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from tests.agent.conftest import CLUSTER
from tests.agent.helpers import job_command, wait_for

OUTPUT_TUNING = {"ZEN_AGENT_LOG_FLUSH_S": "0.2"}


@pytest.fixture
def logs_dir(tmp_path):
    return tmp_path / "joblogs"


@pytest.fixture
def zen_env(scheduler, db_url, config_file, pubsub_server, logs_dir):
    """What a user's shell has in a local stack's directory (``zen`` reads it from .zen/stack.json)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ZEN_", "PUBSUB_"))}
    env.update({"ZEN_DATABASE_URL": db_url, "ZEN_PROJECT": scheduler.config.project, "ZEN_CONFIG": str(config_file),
                "PUBSUB_EMULATOR_HOST": pubsub_server.address, "ZEN_JOB_LOGS_DIR": str(logs_dir)})
    return env


def zen(forks, env, *args: str, cwd, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return forks.run("zen.cli.main", args, env, cwd, timeout_s)


def start_agent(agents, logs_dir, vm="vm-a", **tuning):
    return agents.start(vm, ZEN_JOB_LOGS_DIR=str(logs_dir), **OUTPUT_TUNING, **tuning)


def test_zen_logs_shows_both_streams_in_order_and_labelled(scheduler, agents, logs_dir, zen_env, cli_forks, tmp_path):
    start_agent(agents, logs_dir)
    scheduler.submit("both-1", job_command("--count", "4", "--every", "0.1", "--exit", "2"))
    scheduler.wait_status("both-1", "FAILED")

    shown = zen(cli_forks, zen_env, "logs", "both-1", cwd=tmp_path)

    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert [line for line in lines if "stdout]" in line] == [
        *(f"[1 vm-a stdout] out {n}" for n in range(1, 5)), "[1 vm-a stdout] attempt=1", "[1 vm-a stdout] exiting with 2"]
    assert [line for line in lines if "stderr]" in line] == [f"[1 vm-a stderr] err {n}" for n in range(1, 5)]
    numbers = [int(line.rsplit(" ", 1)[1]) for line in lines if line.split("] ")[1].startswith(("out", "err"))]
    assert numbers == sorted(numbers)  # the streams interleave as the job wrote them
    assert lines[-1] == "[1 vm-a zen] [zen] end of attempt 1 on vm-a: FAILED, exit code 2"
    raw = zen(cli_forks, zen_env, "logs", "both-1", "--attempt", "1", "--raw", cwd=tmp_path).stdout.splitlines()
    assert raw[:2] == ["out 1", "err 1"] or raw[:2] == ["err 1", "out 1"]
    missing = zen(cli_forks, zen_env, "logs", "both-1", "--attempt", "2", cwd=tmp_path)
    assert missing.returncode == 1 and "job both-1 has had 1 attempt (FAILED): no attempt 2" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_follow_prints_lines_while_the_job_runs_and_exits_with_its_exit_code(scheduler, agents, logs_dir, zen_env,
                                                                              tmp_path):
    start_agent(agents, logs_dir)
    # Started before the job exists: -f waits for it to appear.
    follower = subprocess.Popen([sys.executable, "-m", "zen.cli.main", "logs", "-f", "live-1"], env=zen_env, cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[tuple[str, str]] = []  # (line, the job's status when the line arrived)

    def read():
        for line in follower.stdout:
            job = scheduler.job("live-1")
            seen.append((line.rstrip("\n"), job.status.value if job else "missing"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    scheduler.submit("live-1", job_command("--count", "30", "--every", "0.2", "--exit", "3"))

    assert follower.wait(60) == 3
    reader.join(10)
    # stdout and stderr are separate pipes: which of "out 1" and "err 1" the agent reads first varies
    first_out = next((line, status) for line, status in seen if "stdout] out" in line)
    assert first_out[0] == "[1 vm-a stdout] out 1"
    assert first_out[1] in ("ASSIGNED", "RUNNING")  # printed while the job was still running
    assert [line for line, _ in seen if "stdout] out" in line] == [f"[1 vm-a stdout] out {n}" for n in range(1, 31)]
    assert seen[-1][0] == "[1 vm-a zen] [zen] end of attempt 1 on vm-a: FAILED, exit code 3"
    status_lines = follower.stderr.read()
    assert "zen: live-1 RUNNING (attempt 1 on vm-a)" in status_lines and "zen: live-1 FAILED" in status_lines


def test_submit_wait_streams_the_output_and_exits_with_the_jobs_exit_code(scheduler, agents, logs_dir, zen_env,
                                                                         cli_forks, tmp_path):
    start_agent(agents, logs_dir)

    done = zen(cli_forks, zen_env, "submit", "--job-id", "wait-1", "--cluster", CLUSTER, "--wait", "--",
               *job_command("--print", "hello", "--err", "careful", "--exit", "5"), cwd=tmp_path)

    assert done.returncode == 5, done.stderr
    assert done.stdout.splitlines()[0].startswith("submitted wait-1")
    assert "[1 vm-a stdout] hello" in done.stdout and "[1 vm-a stderr] careful" in done.stdout
    assert "zen: wait-1 FAILED" in done.stderr and "Traceback" not in done.stderr
    ok = zen(cli_forks, zen_env, "submit", "--job-id", "wait-2", "--cluster", CLUSTER, "-f", "--",
             *job_command("--print", "fine"), cwd=tmp_path)
    assert ok.returncode == 0 and "[1 vm-a stdout] fine" in ok.stdout


def test_output_beyond_the_size_limit_keeps_the_head_and_the_tail_with_markers(scheduler, agents, logs_dir, zen_env,
                                                                               cli_forks, tmp_path):
    start_agent(agents, logs_dir, ZEN_AGENT_LOG_LIMIT_BYTES="8192", ZEN_AGENT_LOG_TAIL_BYTES="2048",
                ZEN_AGENT_LOG_LINE_BYTES="1024")
    scheduler.submit("big-1", job_command("--bytes", "100000", "--print", "LAST"))
    scheduler.wait_status("big-1", "SUCCEEDED")

    lines = zen(cli_forks, zen_env, "logs", "big-1", "--raw", cwd=tmp_path).stdout.splitlines()

    head_marker = next(i for i, line in enumerate(lines) if line.startswith("[zen] output reached 6144 bytes"))
    dropped = next(i for i, line in enumerate(lines) if line.startswith("[zen] ") and " dropped: over the limit" in line)
    assert lines[:head_marker] == ["x" * 99] * head_marker and 55 <= head_marker <= 62
    assert head_marker < dropped
    assert lines[-4:] == ["LAST", "attempt=1", "exiting with 0", "[zen] end of attempt 1 on vm-a: SUCCEEDED, exit code 0"]
    tail = lines[dropped + 1:-1]
    assert 2048 - 100 <= sum(len(line) + 1 for line in tail) <= 2048
    kept = len([line for line in lines if line == "x" * 99])
    dropped_count = int(lines[dropped].split()[1])
    assert kept + dropped_count == 1000  # every line is either shipped or counted as dropped


def test_output_survives_the_agent_going_away(scheduler, agents, logs_dir, zen_env, cli_forks, tmp_path):
    agent = start_agent(agents, logs_dir)
    scheduler.submit("gone-1", job_command("--print", "written before the VM went away", "--sleep", "60"),
                     max_attempts=1)
    scheduler.wait_status("gone-1", "RUNNING")
    wait_for(lambda: "before the VM went away" in zen(cli_forks, zen_env, "logs", "gone-1", cwd=tmp_path).stdout, 15,
             what="the line shipped while the job runs")

    assert agent.terminate() == 0  # the VM shuts down (preemption, scale-down)
    scheduler.wait_status("gone-1", "FAILED", "QUEUED", "PENDING", "CANCELLED", timeout_s=20)

    shown = zen(cli_forks, zen_env, "logs", "gone-1", "--raw", cwd=tmp_path).stdout.splitlines()
    assert shown[0] == "written before the VM went away"
    assert shown[-1].startswith("[zen] end of attempt 1 on vm-a: PREEMPTED, exit code 143")
    assert agent.process.poll() is not None  # the agent is gone; its output is not
