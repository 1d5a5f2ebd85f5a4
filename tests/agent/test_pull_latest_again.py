"""A job's image named by the tag ``latest``, or by none (docker reads ``latest``), was pulled only when the VM did not
hold it: a user who pushed a rebuilt image under the same name got the old code on every warm VM that had run the
tag before and the new code on fresh ones (silently wrong results, reruns of one job running different code). Now
such an image is pulled before every attempt, as Kubernetes' default ``imagePullPolicy`` does; another tag, or a
digest, only when absent (``zen.agent.imagepull.mutable``). A re-pull that fails never falls back to the copy held:
the job's ``docker run`` pulls once more (``--pull always``) and, the registry failing still, the attempt is requeued
unspent and the VM retires, as on a VM that held no copy."""

from __future__ import annotations

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.waiting import wait_for
from zen.agent.imagepull import mutable

REPO = "us-docker.pkg.dev/p/r/train"


@pytest.mark.parametrize(("image", "pulled"), [(f"{REPO}:latest", True), (REPO, True), (f"{REPO}:v1", False)])
def test_a_held_latest_or_untagged_image_is_pulled_again_another_tag_is_not(scheduler, agents, tmp_path, image, pulled):
    docker = FakeDocker(tmp_path / "docker")  # without ``pulls``: the VM holds every image (a warm VM)
    docker.ends(0)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=image, max_attempts=1)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and job.status.value in ("SUCCEEDED", "FAILED") and job,
                   60, what="train-1 ended")
    assert (job.status.value, job.exit_code) == ("SUCCEEDED", 0), job.message
    steps = [call[0] for call in docker.calls() if call[0] in ("pull", "run")]
    assert steps == (["pull", "run"] if pulled else ["run"]), steps
    # the copy it replaced, unnamed now, removed (no eviction by name reaches it: warm VMs filled their disks)
    assert (["image", "prune", "--force"] in docker.calls()) is pulled
    [run] = [call for call in docker.calls() if call[0] == "run"]
    assert "--pull" not in run  # pulled: docker run uses what was pulled


def test_a_failed_repull_does_not_run_the_copy_held(scheduler, agents, tmp_path):
    line = "Error response from daemon: received unexpected HTTP status: 503 Service Unavailable"
    docker = FakeDocker(tmp_path / "docker")  # the VM holds the image, the registry answers 503
    docker.pull_fails(line)
    docker.ends(0)  # what the copy held would have done
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=f"{REPO}:latest", max_attempts=1)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and (job.attempt == 2 or job.status.value in (
        "SUCCEEDED", "FAILED")) and job, 60, what="train-1 ended or requeued")
    assert (job.status.value, job.attempt, job.exit_code) == ("QUEUED", 2, None), (job.status.value, job.message)
    assert f"docker could not start a job's container: docker: {line}" in (job.message or ""), job.message
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 60, what="vm-a retired")


@pytest.mark.parametrize(("image", "again"), [
    ("train", True), ("train:latest", True), ("localhost:5000/train", True), ("localhost:5000/train:latest", True),
    ("train:v1", False), ("localhost:5000/train:1", False), ("train:latest-gpu", False),
    (f"{REPO}@sha256:{'a' * 64}", False), (f"{REPO}:latest@sha256:{'a' * 64}", False)])
def test_which_images_are_pulled_before_every_attempt(image, again):
    assert mutable(image) is again


def test_a_repull_a_registry_refuses_for_its_rate_limit_runs_the_copy_held_saying_so(scheduler, agents, tmp_path):
    """Docker Hub counts each pull per address, every VM behind the same NAT sharing it for hours: requeued, each
    attempt of a ``latest`` image the limit refused retired VM after VM, each refused the same way."""
    line = "Error response from daemon: toomanyrequests: You have reached your unauthenticated pull rate limit."
    docker = FakeDocker(tmp_path / "docker")  # the VM holds the image
    docker.pull_fails(line)
    docker.ends(0)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=f"{REPO}:latest", max_attempts=1)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and (job.attempt == 2 or job.status.value in (
        "SUCCEEDED", "FAILED")) and job, 60, what="train-1 ended or requeued")
    assert (job.status.value, job.attempt, job.exit_code) == ("SUCCEEDED", 1, 0), (job.status.value, job.message)
    assert "refused to pull" in (job.message or "") and "the job runs the copy this VM holds" in job.message, job.message
    [run] = [call for call in docker.calls() if call[0] == "run"]
    assert "--pull" not in run
