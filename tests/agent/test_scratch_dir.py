"""A job's container runs as nobody, whose HOME does not exist, on a read-only root: Zen set its HOME to /tmp, a
tmpfs in memory counted in its memory limit. Every cache a typical ML job writes under HOME (Hugging Face's
``~/.cache/huggingface``, torch hub's, pip's) went to memory: a large model's download failed "No space left on
device" or took the job to its memory limit, where a plain ``docker run`` writes it to disk. Every attempt has a
scratch directory on the VM's disk now, ``ZEN_SCRATCH_DIR``, inside its attempt's directory (its share of the disk
measures it), writable by the container's user, its HOME unless its env sets one, never uploaded, gone with the
attempt (``zen.agent.staging.AttemptData.scratch_dir``). The agent in container mode against the stand-in docker
(``fakedocker``), and the Cloud Storage stand-in for the outputs."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from google.cloud import storage as gcs

from tests.agent.fakedocker import FakeDocker
from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from tests.agent.test_confinement import BIG, option, spec
from tests.agent.test_staging import client  # noqa: F401 (fixture)
from tests.agent.test_staging_faults import WORDS, on_a_worn_disk
from zen.agent.agent import Agent
from zen.agent.container import Sandbox, container_options
from zen.agent.runner import attempt_name, docker_argv
from zen.agent.slots import Capacity, Slots
from zen.core.models import Heartbeat


def run_until_ended(transport: FakeTransport, agent: Agent) -> None:
    """Claims confirmed; the agent shuts down once the attempt (in a thread of its own) has ended."""
    confirm = confirm_claims(VM)

    def scheduler(message):
        if getattr(message, "status", None) is not None and message.status.value in ("SUCCEEDED", "FAILED"):
            agent.request_shutdown("test over")
        return confirm(message)

    transport.answer = scheduler
    assert agent.run() == 0


def run_one(tmp_path: Path, docker: FakeDocker, **fields) -> tuple[list[str], list[tuple[str, int, str]]]:
    """One attempt of job ``train`` through the agent: its ``docker run`` argv, and the job's reports."""
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("train", image="img:1", command=["python", "train.py"], **fields))
    settings = dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"))
    agent = Agent(IDENTITY, settings, transport, local=False, slots=Slots(Capacity(gpus=1, max_jobs=1)),
                  sandbox=Sandbox(shape=BIG))
    run_until_ended(transport, agent)
    return next(call for call in docker.calls() if call[0] == "run"), [r[:3] for r in transport.job_reports()]


def scratch_of(tmp_path: Path, docker: FakeDocker, run: list[str]) -> Path:
    """The HOME the job's container was given: its ZEN_SCRATCH_DIR, on the VM's disk, mounted read-write at the same
    path, inside the attempt's directory, writable by any user (nobody, a gang node's uid, the image's own) as it
    started."""
    options = run[:run.index("--")]
    home = options[options.index("-e", options.index("--user")) + 1]
    assert home.startswith("HOME="), options
    scratch = Path(home.removeprefix("HOME="))
    assert f"ZEN_SCRATCH_DIR={scratch}" in options
    assert scratch.parent == tmp_path / "work" / attempt_name("train", 1)  # what the disk watch measures
    mounts = [options[i + 1] for i, arg in enumerate(options) if arg == "-v"]
    assert f"{scratch}:{scratch}" in mounts  # read-write, at the same path
    assert docker.home(option(run, "--name")) == {"path": str(scratch), "mode": 0o777}  # there, as the job starts
    return scratch


def test_a_jobs_caches_go_to_its_scratch_directory_on_disk_never_uploaded(tmp_path, storage):
    bucket = gcs.Client().create_bucket("out-bkt")
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(0, writes={"model.bin": "weights"},
                caches={".cache/huggingface/hub/model.safetensors": "a large model"})
    run, reports = run_one(tmp_path, docker, outputs="gs://out-bkt/runs")
    assert reports[-1] == ("train", 1, "SUCCEEDED")
    scratch = scratch_of(tmp_path, docker, run)
    assert "HOME=/tmp" not in run
    assert not scratch.exists() and not scratch.parent.exists()  # gone with the attempt
    assert sorted(blob.name for blob in bucket.client.list_blobs("out-bkt")) == [
        "runs/train/attempt-1/_ZEN_OUTPUTS.json", "runs/train/attempt-1/model.bin"]  # the caches stayed on the VM


def test_a_job_without_data_has_its_scratch_directory_too(tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(0, caches={".cache/pip/wheel": "w"})
    run, reports = run_one(tmp_path, docker)
    assert reports[-1] == ("train", 1, "SUCCEEDED")
    scratch = scratch_of(tmp_path, docker, run)
    assert not any(arg.startswith(("ZEN_INPUT_DIR=", "ZEN_OUTPUT_DIR=")) for arg in run)  # it has no data
    assert not scratch.parent.exists()


def test_the_jobs_own_home_and_the_images_user_are_left_as_they_are():
    dirs = {"ZEN_SCRATCH_DIR": "/work/a/scratch"}
    assert "HOME=/work/a/scratch" in container_options(spec(data_dirs=dirs), Sandbox(run_as="1000:1000"))
    own = docker_argv(spec(data_dirs=dirs, env={"HOME": "/data"}))  # the job's env sets it: kept
    assert "HOME=/data" in own and "HOME=/work/a/scratch" not in own
    image = container_options(spec(data_dirs=dirs), Sandbox(run_as="image"))  # its own user, its own HOME
    assert not any(arg.startswith("HOME=") for arg in image) and "/work/a/scratch:/work/a/scratch" in image


def test_a_plain_process_is_given_its_scratch_directory_too(tmp_path):
    """Local mode (``ZEN_AGENT_LOCAL=1``): the job's environment has ``ZEN_SCRATCH_DIR`` as a container's does (its
    HOME is the agent's user's own, as before), a directory it writes, gone after the attempt."""
    write = ("import os; d = os.environ['ZEN_SCRATCH_DIR']; open(os.path.join(d, 'cache'), 'w').write('x'); "
             "print('scratch', d, sorted(os.listdir(d)))")
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("train", command=[sys.executable, "-c", write]))
    agent = Agent(IDENTITY, dataclasses.replace(SETTINGS, work_dir=str(tmp_path / "work")), transport, local=True)
    run_until_ended(transport, agent)
    final = [m for m in transport.published if isinstance(m, Heartbeat) and m.status.value != "RUNNING"][-1]
    scratch = tmp_path / "work" / attempt_name("train", 1) / "scratch"
    assert final.status.value == "SUCCEEDED" and f"scratch {scratch} ['cache']" in (final.message or ""), final.message
    assert not scratch.parent.exists()


def test_a_job_without_data_whose_directory_is_made_breaks_the_vms_disk_faults_in_a_row(client, tmp_path,  # noqa: F811
                                                                                        monkeypatch):
    """Three attempts in a row whose directory this VM's disk failed retire it (``zen.agent.limits``); a job without
    data whose scratch directory was made on that disk, between them, is an attempt that worked, as a staging that
    worked is: the faults start again from none. Not counted, the VM retired at the next fault, saying three attempts
    in a row could not stage, and took no more jobs."""
    starts = [start_message(job_id, **({} if job_id == "plain" else {"inputs": WORDS}))
              for job_id in ("d1", "d2", "plain", "d3", "later")]
    agent, transport, _, ended = on_a_worn_disk(tmp_path, monkeypatch, starts, sound="later")
    assert ended == {"d1": "PREEMPTED", "d2": "PREEMPTED", "plain": "SUCCEEDED", "d3": "PREEMPTED",
                     "later": "SUCCEEDED"}, ended
    assert agent.pulls.exhausted() is None and "RETIRED" not in transport.vm_states()
