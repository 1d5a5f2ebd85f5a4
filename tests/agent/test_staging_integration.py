"""Inputs and outputs end to end: a real agent process, the real scheduler (Pub/Sub stand-in, the
functions, Postgres; see conftest.py) and the Cloud Storage stand-in through STORAGE_EMULATOR_HOST."""

from __future__ import annotations

import sys

import pytest
from google.cloud import storage as gcs

from tests.agent.test_staging import COPY_UPPER
from tests.waiting import wait_for


@pytest.fixture
def buckets(storage):
    client = gcs.Client()
    for name in ("data-bkt", "out-bkt"):
        client.create_bucket(name)
    client.bucket("data-bkt").blob("corpus/words.txt").upload_from_string(b"alpha beta\n")
    return client


def start_agent(agents, storage, tmp_path):
    return agents.start("vm-a", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work"))


def test_a_job_reads_its_input_and_its_output_appears_in_the_bucket(scheduler, agents, storage, buckets, tmp_path):
    agent = start_agent(agents, storage, tmp_path)
    scheduler.submit("data-1", [sys.executable, "-c", COPY_UPPER],
                     inputs=[{"uri": "gs://data-bkt/corpus/words.txt", "size_gb": 0.001}], outputs="gs://out-bkt/runs")

    job = scheduler.wait_status("data-1", "SUCCEEDED")

    assert buckets.bucket("out-bkt").blob("runs/data-1/attempt-1/upper.txt").download_as_bytes() == b"ALPHA BETA\n"
    assert "zen: staged 1 file, 11 B in" in job.message and "uploaded 1 file, 11 B in" in job.message
    assert job.request["inputs"] == [{"uri": "gs://data-bkt/corpus/words.txt", "size_gb": 0.001}]
    # Logged as the attempt's files are cleaned up, after its final report (the status above).
    wait_for(lambda: agent.said("job data", job_id="data-1", staged_bytes=11, uploaded_bytes=11), 10,
             what="the agent's 'job data' line")


def test_a_missing_input_and_a_failed_upload_fail_the_attempt_with_the_reason(scheduler, agents, storage, buckets,
                                                                              tmp_path):
    start_agent(agents, storage, tmp_path)
    scheduler.submit("no-input", [sys.executable, "-c", COPY_UPPER], inputs=[{"uri": "gs://data-bkt/missing.txt"}])
    scheduler.submit("no-bucket", [sys.executable, "-c", COPY_UPPER],
                     inputs=[{"uri": "gs://data-bkt/corpus/words.txt"}], outputs="gs://gone-bkt/runs")

    missing = scheduler.wait_status("no-input", "FAILED", timeout_s=30)
    upload = scheduler.wait_status("no-bucket", "FAILED", timeout_s=30)

    assert missing.message.startswith("zen: input gs://data-bkt/missing.txt: no such object")
    assert missing.exit_code is None
    assert upload.exit_code == 0 and "The specified bucket does not exist: gone-bkt" in upload.message
    assert "upload of upper.txt to gs://gone-bkt/runs/no-bucket/attempt-1/upper.txt failed" in upload.message


def test_the_vm_reports_its_warm_cache_and_the_next_job_on_that_input_goes_there_first(scheduler, agents, storage,
                                                                                      buckets, tmp_path):

    start_agent(agents, storage, tmp_path)  # in us-central1
    inputs = [{"uri": "gs://data-bkt/corpus/words.txt"}]
    scheduler.submit("warm-1", [sys.executable, "-c", COPY_UPPER], inputs=inputs)
    scheduler.wait_status("warm-1", "SUCCEEDED")
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("cached_inputs") == ["gs://data-bkt/corpus/words.txt"]
             and scheduler.vm("vm-a")["state"] == "IDLE", what="a VM heartbeat reporting the cached input")

    scheduler.submit("warm-2", [sys.executable, "-c", COPY_UPPER], inputs=inputs)
    job = scheduler.wait_status("warm-2", "SUCCEEDED")

    admitted = [reason for _, status, reason in scheduler.history("warm-2") if status == "QUEUED"]
    assert admitted == ["admitted; start offered to VM vm-a in us-central1 first, whose warm cache holds its inputs; "
                        f"widened after {scheduler.config.deadlines.data_wait_s:g} s unclaimed"]
    assert "zen: staged 1 file, 0 B (and 11 B from the cache) in" in job.message
    assert storage.state.downloads["data-bkt/corpus/words.txt"] == 1  # downloaded for the first job only


def test_the_warm_vm_takes_the_job_while_an_equally_idle_cold_vm_of_its_region_does_not(scheduler, agents, storage,
                                                                                          buckets, tmp_path):
    """Per VM, not only per region (zen.core.routing): the start is offered to the warm VM's control
    subscription alone, so the cold VM, idle in the same region and pulling its start subscription 30
    times as often, never sees it (before offers, the region's first puller took it)."""

    warm = agents.start("vm-a", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work-a"),
                        ZEN_AGENT_POLL_S="3")
    inputs = [{"uri": "gs://data-bkt/corpus/words.txt"}]
    scheduler.submit("warm-1", [sys.executable, "-c", COPY_UPPER], inputs=inputs)
    scheduler.wait_status("warm-1", "SUCCEEDED")
    cold = agents.start("vm-b", STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work-b"))
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("cached_inputs") == ["gs://data-bkt/corpus/words.txt"]
             and scheduler.vm("vm-a")["state"] == "IDLE" and (scheduler.vm("vm-b") or {}).get("state") == "IDLE",
             what="both VMs idle, vm-a reporting the cached input")

    scheduler.submit("warm-2", [sys.executable, "-c", COPY_UPPER], inputs=inputs)
    job = scheduler.wait_status("warm-2", "SUCCEEDED")

    assert job.vm == "vm-a" and "(and 11 B from the cache)" in job.message
    assert warm.said("start offered to this VM", job_id="warm-2")
    assert not [line for line in cold.logs() if line.get("job_id") == "warm-2"]  # never offered, pulled or claimed
    assert [reason for _, status, reason in scheduler.history("warm-2") if status == "QUEUED"] == [
        "admitted; start offered to VM vm-a in us-central1 first, whose warm cache holds its inputs; widened after "
        f"{scheduler.config.deadlines.data_wait_s:g} s unclaimed"]
