"""The power-off file's root unit (``zen-fence.path``) starts as soon as the file exists and copies it to the journal:
a file created and then written gave the journal an empty reason most times (the unit read it between the two), and
the operator asking why a VM went off had nothing. The file now appears whole (``zen.agent.fencefile``), from the
agent's fence and from the job's supervisor alike."""

from __future__ import annotations

import os
import threading

import pytest

from zen.agent import launch, leftover

WRITERS = {"agent": leftover.fence_vm, "supervisor": launch._fence_vm}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_the_power_off_file_is_read_whole_the_moment_it_exists(writer, tmp_path):
    empty = 0
    for n in range(200):
        path = str(tmp_path / f"fence-{n}")
        asking = threading.Thread(target=WRITERS[writer], args=(path, "a container left may run"))
        asking.start()
        while not os.path.exists(path):
            pass
        with open(path) as seen:  # as the unit's `cat` does, the moment the path exists
            empty += seen.read() != "a container left may run\n"
        asking.join()
    assert empty == 0, f"{empty} of 200 power-off files read without their reason"


def test_a_second_reason_keeps_the_first(tmp_path):
    path = str(tmp_path / "fence")
    leftover.fence_vm(path, "first")
    launch._fence_vm(path, "second")
    assert open(path).read() == "first\nsecond\n"
    assert os.listdir(tmp_path) == ["fence"]  # nothing staged left beside it



def test_reasons_given_at_once_are_all_kept(tmp_path):
    """The agent and the job's supervisor may ask at the same moment: neither's reason is lost."""
    for n in range(50):
        path = str(tmp_path / f"fence-{n}")
        go = threading.Barrier(4)

        def ask(i: int) -> None:
            go.wait()
            (leftover.fence_vm if i % 2 else launch._fence_vm)(path, f"reason {i}")

        askers = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in askers:
            t.start()
        for t in askers:
            t.join()
        assert sorted(open(path).read().splitlines()) == [f"reason {i}" for i in range(4)]
        assert sorted(os.listdir(tmp_path)) == sorted(f"fence-{m}" for m in range(n + 1))  # nothing staged left
