"""An agent that dies after its job's container exited, while it uploads the job's outputs (a crash, the OOM killer,
``kill -9``), and that systemd restarts on the same VM. The job has ended: its exit code is journaled as docker gives
it, and its outputs are in its work directory. The new agent resumes the upload and sends the attempt's real final
report (SUCCEEDED, or FAILED with the exit code). It reported the attempt PREEMPTED, and the finished job, hours of
it in service, was run again from its start. Where the upload cannot be resumed safely (its directory gone, the
attempt's lease fallen meanwhile: Zen may be running the job elsewhere) it is PREEMPTED, as before. The real agent,
restarted as systemd restarts it, in container mode against the stand-in docker (``fakedocker``), the Cloud Storage
stand-in holding the upload, and the real scheduler (see conftest.py)."""

from __future__ import annotations

import shutil
import time

import pytest
from google.cloud import storage as gcs

from tests.agent.conftest import DEADLINES
from tests.agent.fakedocker import FakeDocker
from tests.agent.helpers import wait_for
from zen.adapters.joblogs import LocalReader
from zen.core import lease
from zen.core.config import load_config

IMAGE = "us-docker.pkg.dev/p/r/train:1"
CLUSTER = "1xl4"  # one job per VM
OUTPUTS = {"metrics.json": '{"loss": 0.1}', "model.bin": "weights"}  # uploaded in name order: metrics.json first
# 30 s: the fence (22 s) leaves a loaded machine's agent restart room (a fresh clone's run beside two other test runs
# on 2 cores restarted it past a 14.5 s fence). The fence test, which waits the fence out, keeps the agent tests'
# 10 s (a fence of 7 s); no other waits for it.
TIMEOUT_S = 30.0


def fence_s(timeout_s: float) -> float:
    return lease.fence_s(timeout_s, DEADLINES.stop_grace_s, 0.5)


@pytest.fixture
def timeout_s() -> float:
    """Zen's ``heartbeat_timeout_s`` here (a test parametrizes it to change it)."""
    return TIMEOUT_S


@pytest.fixture
def config(project, timeout_s):
    deadlines = DEADLINES.model_copy(update={"heartbeat_timeout_s": timeout_s})
    return load_config().model_copy(update={"project": project, "deadlines": deadlines})


@pytest.fixture
def bucket(storage):
    return gcs.Client().create_bucket("out-bkt")


def start_agent(agents, docker: FakeDocker, storage, tmp_path, **tuning: str):
    return agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path, ZEN_CLUSTER=CLUSTER,
                        STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work"), **tuning)


def killed_while_uploading(scheduler, agents, storage, tmp_path, job_id: str, code: int):
    """The job's container exits ``code`` after writing its outputs; the agent is killed while the first of them is
    being stored. Returns the stand-in docker, and the held upload (released by the caller)."""
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(code, writes=OUTPUTS)
    held = storage.state.hold("metrics.json", "store")
    doomed = start_agent(agents, docker, storage, tmp_path)
    scheduler.submit(job_id, ["python", "train.py"], image=IMAGE, cluster=CLUSTER, outputs="gs://out-bkt/runs")
    assert held.reached.wait(60), "the upload never began"
    doomed.kill()  # SIGKILL of the agent alone: the job has ended, its outputs are on the VM's disk
    return docker, held


def runs(docker: FakeDocker) -> list[list[str]]:
    return [call for call in docker.calls() if call[0] == "run"]


def stored(bucket) -> list[str]:
    """The objects' names (the held upload, released, may store its object again meanwhile: a new generation)."""
    return [blob.name for blob in bucket.client.list_blobs(bucket.name)]


@pytest.mark.parametrize("code, status", [(0, "SUCCEEDED"), (3, "FAILED")])
def test_a_restarted_agent_resumes_the_upload_of_a_job_that_ended_and_reports_how_it_ended(
        scheduler, agents, storage, bucket, tmp_path, code, status):
    job_id = f"ended-{code}"
    docker, held = killed_while_uploading(scheduler, agents, storage, tmp_path, job_id, code)

    restarted = start_agent(agents, docker, storage, tmp_path)  # systemd restarts it on the same VM
    job = scheduler.wait_status(job_id, "SUCCEEDED", "FAILED", "QUEUED", "ASSIGNED", "PENDING", timeout_s=60)
    if job.status.value not in ("SUCCEEDED", "FAILED"):  # requeued: wait for how the rerun ends, to say so
        job = scheduler.wait_status(job_id, "SUCCEEDED", "FAILED", timeout_s=60)
    held.release.set()

    assert (job.status.value, job.attempt, job.exit_code) == (status, 1, code), scheduler.history(job_id)
    assert len(runs(docker)) == 1  # the job ran once
    assert bucket.blob(f"runs/{job_id}/attempt-1/model.bin").download_as_bytes() == b"weights"  # the restarted agent's
    assert "uploaded 2 files" in job.message and "resumed" in job.message, job.message
    assert restarted.said("an attempt the previous agent ran had ended; its upload resumed", job_id=job_id, attempt=1)
    wait_for(lambda: not list((tmp_path / "work").glob(f"{job_id}-*")), 10, what="the attempt's directory removed")


def test_an_attempt_whose_directory_is_gone_is_reported_preempted_and_run_again(
        scheduler, agents, storage, bucket, tmp_path):
    docker, held = killed_while_uploading(scheduler, agents, storage, tmp_path, "gone-dir", 0)
    [directory] = list((tmp_path / "work").glob("gone-dir-*"))
    shutil.rmtree(directory)

    restarted = start_agent(agents, docker, storage, tmp_path)
    job = wait_for(lambda: (j := scheduler.job("gone-dir")).attempt == 2 and j.status.value == "SUCCEEDED" and j,
                   60, 0.2, what="attempt 2 run and succeeded")
    held.release.set()

    assert len(runs(docker)) == 2 and job.vm == "vm-a"
    assert restarted.said("an attempt the previous agent ran ended with it; reported PREEMPTED", job_id="gone-dir",
                          attempt=1)


@pytest.mark.parametrize("timeout_s", [DEADLINES.heartbeat_timeout_s])
def test_an_attempt_whose_lease_fell_while_no_agent_ran_is_not_resumed(
        scheduler, agents, storage, bucket, tmp_path, timeout_s):
    """The agent comes back after the attempt's fence fell: Zen may have taken the attempt for lost and given the
    job to another VM. It must not report that attempt SUCCEEDED: PREEMPTED, as the dead agent would have."""
    docker, held = killed_while_uploading(scheduler, agents, storage, tmp_path, "late", 0)
    time.sleep(fence_s(timeout_s) + 0.5)

    restarted = start_agent(agents, docker, storage, tmp_path)
    wait_for(lambda: scheduler.job("late").attempt == 2, 60, 0.2, what="attempt 1 requeued")
    held.release.set()

    assert "runs/late/attempt-1/model.bin" not in stored(bucket)
    [said] = restarted.said("an attempt the previous agent ran ended with it; reported PREEMPTED", job_id="late",
                            attempt=1)
    assert "no heartbeat reached Zen" in said.get("reason", ""), said


def test_the_resumed_output_goes_on_past_the_lines_the_dead_agent_shipped(scheduler, agents, storage, bucket, tmp_path):
    """The job's lines the dead agent shipped keep their numbers, and the attempt's end is numbered after them: it was
    numbered 1 again, the first line's number (``zen logs -f``, reading past it, never printed how the job ended; a
    later read showed one of the two entries of number 1)."""
    logs = tmp_path / "logs"
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(0, stderr="epoch 1\nepoch 2\n", writes=OUTPUTS)
    held = storage.state.hold("metrics.json", "store")
    doomed = start_agent(agents, docker, storage, tmp_path, ZEN_JOB_LOGS_DIR=str(logs))
    scheduler.submit("numbered", ["python", "train.py"], image=IMAGE, cluster=CLUSTER, outputs="gs://out-bkt/runs")
    assert held.reached.wait(60), "the upload never began"
    entries = LocalReader(logs)
    shipped = wait_for(lambda: len(got := entries.new_entries("numbered", 1)) >= 2 and got, 10, what="the lines shipped")
    doomed.kill()

    start_agent(agents, docker, storage, tmp_path, ZEN_JOB_LOGS_DIR=str(logs))
    job = scheduler.wait_status("numbered", "SUCCEEDED", "FAILED", "QUEUED", "ASSIGNED", "PENDING", timeout_s=60)
    held.release.set()
    assert (job.status.value, job.attempt) == ("SUCCEEDED", 1), scheduler.history("numbered")

    [end] = wait_for(lambda: entries.new_entries("numbered", 1), 10, what="the attempt's end")
    assert end.final and end.text.startswith("[zen] end of attempt 1 on vm-a: SUCCEEDED"), end
    assert [(e.seq, e.text) for e in shipped] == [(1, "epoch 1"), (2, "epoch 2")], shipped
    assert end.seq == 3, end  # after them, with no gap (a reader waits for a missing number)
