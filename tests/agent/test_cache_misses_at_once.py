"""Attempts on one VM (max_jobs_per_vm > 1: an array's tasks, a sweep) staging the same object at once: the object
is downloaded once, and the others copy it from the warm cache (zen.agent.cache) once it is kept. Each missed on
it, so each downloaded it (an array of four tasks on a 100 GB data set pulled it four times over, as slowly), the
stand-in counting one media read per attempt."""

from __future__ import annotations

import sys
import threading

import pytest
from google.cloud import storage as gcs

from tests.agent.conftest import shared_vms_config
from tests.agent.helpers import wait_for
from zen.agent.cache import InputCache
from zen.agent.staging import AttemptData, Unavailable
from zen.core.models import InputSpec

URI = "gs://data-bkt/sets/shard-0"
SHARED = "8xa100-40gb"
COUNT_BYTES = ("import os, pathlib; i, o = os.environ['ZEN_INPUT_DIR'], os.environ['ZEN_OUTPUT_DIR']; "
               "pathlib.Path(o, 'size.txt').write_text(str(len(pathlib.Path(i, 'shard-0').read_bytes())))")


@pytest.fixture
def config(project):
    return shared_vms_config(project, SHARED)


@pytest.fixture
def client(storage):
    client = gcs.Client()
    client.create_bucket("data-bkt")
    client.create_bucket("out-bkt")
    client.bucket("data-bkt").blob("sets/shard-0").upload_from_string(b"s" * 4096)
    return client


def attempt(tmp_path, cache: InputCache, job_id: str) -> AttemptData:
    data = AttemptData(job_id, 1, [InputSpec(uri=URI)], None, tmp_path / "work", cache=cache)
    data.prepare()
    return data


def staging(data: AttemptData) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            data.stage()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def test_two_attempts_staging_one_object_at_once_download_it_once(client, storage, tmp_path):
    cache = InputCache(tmp_path / "cache", 10**6)
    first, second = attempt(tmp_path, cache, "task-0"), attempt(tmp_path, cache, "task-1")
    held = storage.state.hold("sets/shard-0", "read")  # the first download, under way
    first_thread, first_errors = staging(first)
    assert held.reached.wait(10)

    second_thread, second_errors = staging(second)
    second_thread.join(2)  # it downloads, or waits for the first's download
    held.release.set()
    for thread in (first_thread, second_thread):
        thread.join(20)

    assert not first_errors and not second_errors
    assert storage.state.downloads["data-bkt/sets/shard-0"] == 1
    assert (first.input_dir / "shard-0").read_bytes() == (second.input_dir / "shard-0").read_bytes() == b"s" * 4096
    assert (first.staged.bytes, second.staged.cached_bytes) == (4096, 4096)


def test_an_attempt_waiting_on_anothers_download_downloads_itself_when_that_one_fails(client, storage, tmp_path):
    cache = InputCache(tmp_path / "cache", 10**6)
    first, second = attempt(tmp_path, cache, "task-0"), attempt(tmp_path, cache, "task-1")
    held = storage.state.hold("sets/shard-0", "read")
    first_thread, first_errors = staging(first)
    assert held.reached.wait(10)
    second_thread, second_errors = staging(second)
    second_thread.join(2)

    first.cancel.set()  # its download ends without a copy kept (a STOP, the fence, its own limit)
    held.release.set()
    for thread in (first_thread, second_thread):
        thread.join(20)

    assert first_errors and not isinstance(first_errors[0], Unavailable) and not second_errors
    assert (second.input_dir / "shard-0").read_bytes() == b"s" * 4096
    assert storage.state.downloads["data-bkt/sets/shard-0"] == 2


def test_an_attempt_waiting_on_anothers_download_stops_waiting_when_cancelled(client, storage, tmp_path):
    cache = InputCache(tmp_path / "cache", 10**6)
    first, second = attempt(tmp_path, cache, "task-0"), attempt(tmp_path, cache, "task-1")
    held = storage.state.hold("sets/shard-0", "read")
    first_thread, _ = staging(first)
    assert held.reached.wait(10)
    second_thread, second_errors = staging(second)
    second_thread.join(1)

    second.cancel.set()
    second_thread.join(10)
    ended = not second_thread.is_alive()
    held.release.set()
    first_thread.join(20)

    assert ended and second_errors and "cancelled" in str(second_errors[0])


def test_two_tasks_of_an_array_on_one_vm_download_their_data_set_once(scheduler, agents, client, storage, tmp_path):
    held = storage.state.hold("sets/shard-0", "read")  # the first task's download, under way until released
    scheduler._publish(scheduler.config.topics.job_submitted, {
        "job_id": "sweep", "user_id": "alice", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4,
        "command": [sys.executable, "-c", COUNT_BYTES], "array": {"count": 2}, "inputs": [{"uri": URI}],
        "outputs": "gs://out-bkt/runs"})
    agents.start("vm-a", ZEN_CLUSTER=SHARED, STORAGE_EMULATOR_HOST=storage.address,
                 ZEN_AGENT_WORK_DIR=str(tmp_path / "work"))
    assert held.reached.wait(60)
    wait_for(lambda: (r := scheduler.vm("vm-a")) and r["jobs"] and len(r["jobs"]) == 2, 30,
             what="vm-a holding both tasks, the second staging while the first's download is held")

    held.release.set()
    tasks = [scheduler.wait_status(f"sweep-{n}", "SUCCEEDED", timeout_s=60) for n in range(2)]

    assert storage.state.downloads["data-bkt/sets/shard-0"] == 1
    assert {task.vm for task in tasks} == {"vm-a"}
    assert sorted("(and 4.1 kB from the cache)" in task.message for task in tasks) == [False, True]
    for n in range(2):
        assert client.bucket("out-bkt").blob(f"runs/sweep-{n}/attempt-1/size.txt").download_as_bytes() == b"4096"
