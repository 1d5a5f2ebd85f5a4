"""Job output through Cloud Logging: the official client (HTTP/JSON transport, anonymous credentials)
against the in-memory stand-in of ``entries:write`` / ``entries:list`` (tests/logging_standin.py);
``zen logs`` reads it back as a subprocess, as a user with a deployed Zen does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.agent.helpers import job_command
from tests.logging_standin import LoggingStandIn
from zen.adapters import cloud_logging as joblogs_cloud
from zen.adapters.cloud_logging import CloudReader, job_filter, logging_client, sink_from_env
from zen.adapters.joblogs import ENDPOINT_ENV
from zen.agent.output import AttemptOutput, OutputLimits
from zen.agent.runner import JobSpec, RunningJob

PROJECT = "zen-logs-test"
LABELS = {"vm": "vm-c", "cluster": "4xa100-40gb", "region": "us-central1", "zone": "us-central1-a"}


@pytest.fixture
def cloud():
    with LoggingStandIn() as standin:
        yield standin


def run_job(cloud, job_id: str, attempt: int, *args: str) -> None:
    sink = sink_from_env({ENDPOINT_ENV: cloud.endpoint}, PROJECT, cloud_by_default=False, labels=LABELS)
    output = AttemptOutput(job_id, attempt, "vm-c", sink, OutputLimits(flush_s=0.1))
    outcome = RunningJob.start(JobSpec(job_id=job_id, attempt=attempt, command=job_command(*args)), local=True,
                               output=output).outcome()
    output.close(f"exit code {outcome.exit_code}", budget_s=10)


def test_the_agent_writes_labelled_structured_entries_the_console_query_finds(cloud):
    run_job(cloud, "c-1", 1, "--print", "to stdout", "--err", "to stderr")

    stored = [e for e in cloud.entries if e["labels"]["job_id"] == "c-1"]
    assert {e["logName"] for e in stored} == {f"projects/{PROJECT}/logs/zen-jobs"}
    by_text = {e["jsonPayload"]["message"]: e for e in stored}
    assert by_text["to stdout"]["labels"] == {**LABELS, "job_id": "c-1", "attempt": "1", "stream": "stdout"}
    assert by_text["to stderr"]["severity"] == "WARNING" and by_text["to stdout"]["severity"] == "INFO"
    assert by_text["to stdout"]["resource"]["type"] == "generic_node"
    assert stored[-1]["jsonPayload"]["final"] is True
    assert [e["jsonPayload"]["seq"] for e in stored] == list(range(1, len(stored) + 1))
    assert cloud.writes < len(stored)  # batched


def test_the_reader_returns_each_entry_once_in_order(cloud, monkeypatch):
    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0)  # pages of 2: unpaced, or seconds
    run_job(cloud, "c-2", 1, "--print", "first run")
    run_job(cloud, "c-2", 2, "--print", "second run")
    reader = CloudReader(logging_client(PROJECT, cloud.endpoint), PROJECT, page_size=2)

    first = reader.new_entries("c-2", 2)
    assert [e.text for e in first][:1] == ["second run"] and first[-1].final and {e.attempt for e in first} == {2}
    assert reader.new_entries("c-2", 2) == []  # only what came since (jsonPayload.seq > last)
    assert [e.attempt for e in reader.new_entries("c-2")][:1] == [1]
    assert job_filter(PROJECT, "c-2", 2, {"vm-a": 5}).endswith(
        'labels.attempt="2" AND NOT (labels.vm="vm-a" AND jsonPayload.seq<=5)')


def test_zen_logs_reads_cloud_logging_when_no_local_stack_is_in_use(cloud, tmp_path):
    run_job(cloud, "c-3", 1, "--print", "from the cloud", "--exit", "4")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZEN_", "PUBSUB_"))}
    env.update({"ZEN_PROJECT": PROJECT, ENDPOINT_ENV: cloud.endpoint})

    shown = subprocess.run([sys.executable, "-m", "zen.cli.main", "logs", "c-3"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)

    assert shown.returncode == 0, shown.stderr
    assert "[1 vm-c stdout] from the cloud" in shown.stdout.splitlines()
    assert shown.stdout.splitlines()[-1] == "[1 vm-c zen] [zen] end of attempt 1 on vm-c: exit code 4"
