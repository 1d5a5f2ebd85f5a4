"""An agent starting removes the attempt directories a dead agent left in its work directory
(``Agent._sweep_work_dir``): they were never removed, so each crash mid-attempt leaked its staged inputs
on the VM's disk for good. Only directories named as attempts and unlocked are removed: a live agent
(the local stack's VMs share one work directory) locks each of its attempts' (``AttemptData.prepare``);
the cache, other names, links and what they point to stay."""

from __future__ import annotations

import os

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, make_agent
from zen.agent.runner import attempt_name
from zen.agent.settings import AgentSettings
from zen.agent.staging import AttemptData


def test_a_starting_agent_removes_the_attempt_directories_a_dead_agent_left_and_nothing_else(tmp_path):
    work = tmp_path / "work"
    stale = work / attempt_name("crashed:job", 3)
    (stale / "inputs" / "set").mkdir(parents=True)
    (stale / "inputs" / "set" / "big.bin").write_bytes(b"0" * 1000)
    (stale / "outputs").mkdir()
    live = AttemptData("running", 1, [], None, work)  # another agent's attempt on the same disk
    live.prepare()
    (live.input_dir / "x").write_text("in use")
    cache_entry = work / ".cache" / VM / "0123abcd"
    cache_entry.parent.mkdir(parents=True)
    cache_entry.write_text("cached")
    (work / "notes").mkdir()
    (work / "notes" / "keep.txt").write_text("not an attempt")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("outside the work dir")
    os.symlink(outside, work / attempt_name("linked", 1))  # named as an attempt, but a link
    (work / attempt_name("a-file", 2)).write_text("a file, not a directory")

    agent = make_agent(FakeTransport(VM), AgentSettings(poll_s=0.05, vm_heartbeat_s=1000, work_dir=str(work)))
    assert agent.run() == 0

    assert not stale.exists()
    assert (live.input_dir / "x").read_text() == "in use"
    assert cache_entry.read_text() == "cached"
    assert (work / "notes" / "keep.txt").exists() and (work / attempt_name("a-file", 2)).is_file()
    assert (work / attempt_name("linked", 1)).is_symlink() and (outside / "precious").exists()
    live.cleanup()
    assert not live.root.exists()


def test_an_attempts_directory_is_locked_from_prepare_to_cleanup(tmp_path):
    import fcntl

    data = AttemptData("j1", 1, [], None, tmp_path / "work")
    data.prepare()
    probe = os.open(data.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = False
        except BlockingIOError:
            locked = True
        assert locked
        data.cleanup()
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with it
    finally:
        os.close(probe)


def test_a_cache_directory_named_like_an_attempt_is_never_swept(tmp_path):
    work = tmp_path / "work"
    cache = work / "vm-cache-0123456789ab-1"  # ZEN_AGENT_CACHE_DIR may be anywhere, even so
    cache.mkdir(parents=True)
    (cache / "entry").write_text("cached")

    agent = make_agent(FakeTransport(VM), AgentSettings(poll_s=0.05, vm_heartbeat_s=1000, work_dir=str(work),
                                                        cache_dir=str(cache)))
    assert agent.run() == 0

    assert (cache / "entry").read_text() == "cached"


def test_an_agent_starting_while_another_prepares_an_attempt_leaves_it(tmp_path, monkeypatch):
    """The directory bears the attempt's name only once locked: an agent starting between its making
    and its lock (the local stack's VMs share a work directory) took it, and the attempt failed."""
    import fcntl

    from zen.agent import staging

    work = tmp_path / "work"
    sweeper = make_agent(FakeTransport(VM), AgentSettings(poll_s=0.05, vm_heartbeat_s=1000, work_dir=str(work)))
    real_flock = fcntl.flock
    swept = []

    def flock_after_a_sweep(fd, operation):
        if not swept:  # another agent starts at this very moment
            swept.append(True)
            sweeper._sweep_work_dir()
        return real_flock(fd, operation)

    monkeypatch.setattr(staging.fcntl, "flock", flock_after_a_sweep)
    data = AttemptData("j1", 1, [], None, work)
    data.prepare()
    monkeypatch.setattr(staging.fcntl, "flock", real_flock)
    assert swept and data.input_dir.is_dir() and data.output_dir.is_dir()
    data.cleanup()


def test_a_directory_left_between_its_making_and_its_rename_is_swept_once_old(tmp_path):
    """An agent that died between ``mkdir <name>.new`` and its rename left an empty directory no sweep
    took; one just made (another agent about to lock it) stays."""
    work = tmp_path / "work"
    old = work / (attempt_name("crashed", 1) + ".new")
    fresh = work / (attempt_name("making", 1) + ".new")
    old.mkdir(parents=True)
    fresh.mkdir()
    os.utime(old, (os.stat(old).st_atime, os.stat(old).st_mtime - 120))

    agent = make_agent(FakeTransport(VM), AgentSettings(poll_s=0.05, vm_heartbeat_s=1000, work_dir=str(work)))
    assert agent.run() == 0

    assert not old.exists() and fresh.is_dir()
