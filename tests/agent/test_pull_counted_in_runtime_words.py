"""A job's image pull counts toward its ``max_runtime_s`` (``zen.agent.imagepull``), as its staging does, and the final
report says so as it says staging's share. A job killed at its limit after a long pull read "zen: killed after exceeding
max_runtime_s=3600" with nothing of the pull, its command run for much less than that; and a pull cut at the limit after
its inputs were staged named what staging had left of the limit as the job's (``max_runtime_s=3599.87``), not the
``max_runtime_s`` the user gave."""

from __future__ import annotations

import pytest
from google.cloud import storage as gcs

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_container_ends_named import IMAGE


@pytest.fixture
def buckets(storage):
    client = gcs.Client()
    client.create_bucket("data-bkt")
    client.bucket("data-bkt").blob("corpus/words.txt").upload_from_string(b"alpha beta\n")
    return client


def test_a_job_killed_at_its_limit_after_its_pull_says_the_pull_took_some_of_it(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.pulls(lines=3, every_s=0.1)  # then its container runs until killed
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path, ZEN_AGENT_PULL_STALL_S="600")
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE, max_attempts=1, max_runtime_s=2)

    job = scheduler.wait_status("train-1", "FAILED", "SUCCEEDED", "CANCELLED", timeout_s=60)
    assert [call[0] for call in docker.calls() if call[0] in ("pull", "run")] == ["pull", "run"]
    assert (job.message or "").startswith("zen: killed after exceeding max_runtime_s=2 (pulling its image took "), \
        job.message


def test_a_pull_cut_at_the_limit_after_staging_names_the_jobs_limit(scheduler, agents, storage, buckets, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.pulls(lines=1, every_s=0.1, stalls=True)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path, ZEN_AGENT_PULL_STALL_S="600",
                 STORAGE_EMULATOR_HOST=storage.address, ZEN_AGENT_WORK_DIR=str(tmp_path / "work"))
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE, max_attempts=1, max_runtime_s=2,
                     inputs=[{"uri": "gs://data-bkt/corpus/words.txt"}])

    job = scheduler.wait_status("train-1", "FAILED", "SUCCEEDED", "CANCELLED", timeout_s=60)
    assert "zen: pulling the job's image exceeded max_runtime_s=2 (its command never ran; staging its inputs took " \
           in (job.message or ""), job.message
    assert not [call for call in docker.calls() if call[0] == "run"]
