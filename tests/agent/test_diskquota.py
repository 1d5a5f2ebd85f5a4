"""Each attempt's share of the work disk (zen.agent.diskquota): what a directory holds on disk, who is
stopped and when, and the watch that measures the attempts running."""

from __future__ import annotations

import os
import shutil

import pytest

from zen.agent.diskquota import (
    CULPRIT_SHARE, DiskShare, DiskWatch, Usage, decide, disk_size, measure, nearly_full)
from zen.agent.settings import AgentSettings
from zen.core.errors import ConfigError

MB = 1_000_000
GB = 1_000_000_000


def write(path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        out.write(b"x" * size)
        out.flush()
        os.fsync(out.fileno())  # blocks allocated now, not at writeback


def allocated(path) -> int:
    return os.lstat(path).st_blocks * 512


# -- measure ------------------------------------------------------------------------------------

def test_a_tree_of_many_files_counts_every_file_and_folder_by_its_allocated_blocks(tmp_path):
    root = tmp_path / "attempt"
    for folder in range(20):
        for number in range(100):
            write(root / f"d{folder}" / f"f{number}", 10)
    expected = allocated(root) + sum(allocated(entry) for entry in root.rglob("*"))

    usage = measure(root)

    assert usage == Usage(expected, 20 * 100 + 20, True)
    assert usage.bytes >= 2000 * 10  # at least what was written (a block each, on most filesystems)


def test_a_sparse_file_counts_what_it_wrote_not_its_length(tmp_path):
    root = tmp_path / "attempt"
    root.mkdir()
    with open(root / "sparse", "wb") as out:
        out.truncate(10 * GB)  # 10 GB long, nothing written
        out.write(b"x" * 4096)
        out.flush()
        os.fsync(out.fileno())

    usage = measure(root)

    assert os.path.getsize(root / "sparse") == 10 * GB
    assert usage.bytes == allocated(root) + allocated(root / "sparse") and usage.bytes < 1 * MB


def test_links_are_not_followed_and_a_hard_linked_file_counts_once(tmp_path):
    outside = tmp_path / "outside"
    write(outside / "big", 2 * MB)
    root = tmp_path / "attempt"
    write(root / "file", 1 * MB)
    os.link(root / "file", root / "same-file")
    os.symlink(outside, root / "elsewhere")
    os.symlink(outside / "big", root / "big")

    usage = measure(root)

    links = allocated(root / "elsewhere") + allocated(root / "big")  # a link's own blocks (usually 0)
    assert usage.bytes == allocated(root) + allocated(root / "file") + links
    assert usage.entries == 4


def test_the_walk_stops_at_its_bound_on_entries_and_says_so(tmp_path):
    root = tmp_path / "attempt"
    for number in range(50):
        write(root / f"f{number}", 1)

    assert measure(root, max_entries=50).complete
    usage = measure(root, max_entries=20)
    assert usage.entries == 20 and not usage.complete


def test_a_missing_directory_holds_nothing(tmp_path):
    assert measure(tmp_path / "gone") == Usage(0, 0, True)


# -- the share ----------------------------------------------------------------------------------

def test_the_share_is_the_disk_times_the_factor_over_the_jobs_at_once_unless_given():
    assert DiskShare(200 * GB, max_jobs=2, factor=0.5).quota_bytes == 50 * GB
    assert DiskShare(200 * GB).quota_bytes == 100 * GB  # one job at a time, the default factor
    assert DiskShare(200 * GB, max_jobs=2, per_job_bytes=7 * GB).quota_bytes == 7 * GB
    assert DiskShare(200 * GB, max_jobs=2, factor=0.4).describe() == (
        "its 40.0 GB share of this VM's disk (200.0 GB x 0.4 / max_jobs_per_vm 2)")


def test_the_agent_settings_for_the_share_are_checked():
    settings = AgentSettings.from_env({"ZEN_AGENT_DISK_SHARE": "0.3", "ZEN_AGENT_DISK_PER_JOB_BYTES": "4000000",
                                       "ZEN_AGENT_DISK_LOOK_S": "0.5"})
    assert (settings.disk_share, settings.disk_per_job_bytes, settings.disk_look_s) == (0.3, 4 * MB, 0.5)
    assert AgentSettings.from_env({}).disk_per_job_bytes is None and AgentSettings.from_env({}).disk_share == 0.5
    with pytest.raises(ConfigError, match="ZEN_AGENT_DISK_SHARE must be at most 1"):
        AgentSettings.from_env({"ZEN_AGENT_DISK_SHARE": "1.5"})
    with pytest.raises(ConfigError, match="ZEN_AGENT_DISK_PER_JOB_BYTES='0' must be above 0"):
        AgentSettings.from_env({"ZEN_AGENT_DISK_PER_JOB_BYTES": "0"})


def test_the_disk_size_of_a_work_directory_not_made_yet_is_its_parents(tmp_path):
    assert disk_size(tmp_path / "not" / "yet") == disk_size(tmp_path) > 0


# -- the decision -------------------------------------------------------------------------------

SHARE = DiskShare(100 * GB, max_jobs=2, factor=0.8)  # 40 GB each
ROOMY = dict(free_bytes=50 * GB, total_bytes=100 * GB)


def test_an_attempt_over_its_share_is_stopped_with_a_reason_a_user_can_act_on():
    verdicts = decide({("big", 1): Usage(int(41.2 * GB), 10, True), ("small", 1): Usage(1 * GB, 3, True)},
                      SHARE, **ROOMY)

    assert verdicts == {("big", 1): "zen: stopped: the job's work directory reached 41.2 GB, over its 40.0 GB share "
                                    "of this VM's disk (100.0 GB x 0.8 / max_jobs_per_vm 2); write less, or run it "
                                    "alone on a VM (a cluster with max_jobs_per_vm 1)"}


def test_at_its_share_an_attempt_runs_on():
    assert decide({("full", 1): Usage(40 * GB, 1, True)}, SHARE, **ROOMY) == {}


def test_alone_on_its_vm_the_advice_is_a_larger_disk():
    verdicts = decide({("big", 1): Usage(90 * GB, 1, True)}, DiskShare(100 * GB), **ROOMY)
    assert verdicts[("big", 1)].endswith("write less, or run it on VMs with a larger disk (boot_disk_size_gb)")


def test_too_many_entries_to_measure_stops_the_attempt():
    verdicts = decide({("many", 1): Usage(1 * GB, 1_000_000, False)}, SHARE, **ROOMY)
    assert verdicts[("many", 1)].startswith("zen: stopped: the job's work directory holds over 1,000,000 files")


def test_on_a_nearly_full_disk_the_largest_attempt_is_stopped_not_whichever_writes_next():
    measured = {("a", 1): Usage(10 * GB, 1, True), ("b", 1): Usage(30 * GB, 1, True), ("c", 2): Usage(20 * GB, 1, True)}

    verdicts = decide(measured, SHARE, free_bytes=int(1.5 * GB), total_bytes=100 * GB)

    assert list(verdicts) == [("b", 1)]
    assert verdicts[("b", 1)].startswith("zen: stopped: this VM's disk was nearly full (1.5 GB free of 100.0 GB) and "
                                         "the job's work directory, 30.0 GB, was the largest on it")


def test_nearly_full_is_under_two_percent_or_under_one_gb_free():
    assert nearly_full(int(1.9 * GB), 100 * GB) and not nearly_full(int(2.1 * GB), 100 * GB)
    assert nearly_full(int(0.9 * GB), 10 * GB) and not nearly_full(int(1.1 * GB), 10 * GB)


def test_while_a_stopped_attempt_still_holds_its_directory_no_other_is_stopped_for_the_full_disk():
    measured = {("a", 1): Usage(30 * GB, 1, True), ("b", 1): Usage(20 * GB, 1, True)}
    full = dict(free_bytes=0, total_bytes=100 * GB)

    assert decide(measured, SHARE, **full, stopping={("a", 1)}) == {}
    assert list(decide({("b", 1): measured[("b", 1)]}, SHARE, **full, stopping={("a", 1)})) == [("b", 1)]  # a gone


def test_on_a_disk_something_else_filled_an_attempt_holding_little_is_not_stopped():
    little = int(CULPRIT_SHARE * SHARE.quota_bytes) - 1
    assert decide({("a", 1): Usage(little, 1, True)}, SHARE, free_bytes=0, total_bytes=100 * GB) == {}


def test_an_attempt_over_its_share_is_stopped_on_a_full_disk_without_a_second_one():
    measured = {("over", 1): Usage(45 * GB, 1, True), ("b", 1): Usage(39 * GB, 1, True)}
    assert list(decide(measured, SHARE, free_bytes=0, total_bytes=100 * GB)) == [("over", 1)]


# -- the watch ----------------------------------------------------------------------------------

def test_the_watch_gives_the_attempt_over_its_share_its_verdict_until_it_is_removed(tmp_path):
    disk = {"free": 50 * GB}
    watch = DiskWatch(tmp_path, DiskShare(100 * GB, max_jobs=2, per_job_bytes=1 * MB), look_s=60,
                      disk_usage=lambda path: (100 * GB, 50 * GB, disk["free"]), threaded=False)
    writer, neighbour = tmp_path / "writer", tmp_path / "neighbour"
    write(writer / "outputs" / "a", 100_000)
    write(neighbour / "outputs" / "a", 100_000)
    watch.add(("writer", 1), writer)
    watch.add(("neighbour", 1), neighbour)
    try:
        assert watch.look() == {}
        write(writer / "outputs" / "b", 2 * MB)

        assert list(watch.look()) == [("writer", 1)]
        assert "reached 2.1 MB, over its 1.0 MB share" in watch.verdict(("writer", 1))
        assert watch.verdict(("neighbour", 1)) is None
        disk["free"] = 0  # full: but the writer's removal comes first
        assert watch.look() == {}

        watch.remove(("writer", 1))
        assert watch.verdict(("writer", 1)) is None
        assert list(watch.look()) == [("neighbour", 1)]  # still full with the writer gone: the largest left
    finally:
        watch.close()


def test_the_watch_measures_a_newly_added_attempt_at_once_in_its_own_thread(tmp_path):
    import time

    watch = DiskWatch(tmp_path, DiskShare(100 * GB, per_job_bytes=1 * MB), look_s=60,
                      disk_usage=lambda path: (100 * GB, 0, 50 * GB))
    write(tmp_path / "big" / "outputs" / "a", 2 * MB)
    try:
        watch.add(("big", 1), tmp_path / "big")
        deadline = time.monotonic() + 10
        while watch.verdict(("big", 1)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.verdict(("big", 1)) is not None
    finally:
        watch.close()


def test_a_file_deleted_but_held_open_counts_against_its_writer_not_its_neighbour(tmp_path):
    """A job's scratch file, deleted while it writes on (``tempfile.TemporaryFile(dir=...)``), fills the disk
    and no walk sees it: the job ran at three times its share unseen, and on the nearly full disk its neighbour,
    holding the most a walk saw, was stopped instead. A second descriptor of the same file counts it once."""
    share = DiskShare(total_bytes=100 * MB, per_job_bytes=10 * MB)
    hog, neighbour = tmp_path / "hog-1", tmp_path / "nb-1"
    for root in (hog, neighbour):
        (root / "outputs").mkdir(parents=True)
    (neighbour / "outputs" / "model.bin").write_bytes(os.urandom(2 * MB))
    with open(hog / "outputs" / "scratch", "wb") as scratch, open(hog / "outputs" / "scratch", "rb"):
        os.unlink(scratch.name)
        for _ in range(30):
            scratch.write(os.urandom(MB))
        scratch.flush()
        os.fsync(scratch.fileno())
        assert measure(hog).bytes < MB  # the walk alone
        watch = DiskWatch(tmp_path, share, threaded=False, disk_usage=lambda path: (100 * MB, 99 * MB, 1 * MB))
        watch.add(("hog", 1), hog)
        watch.add(("nb", 1), neighbour)

        watch.look()

        assert watch.verdict(("nb", 1)) is None
        assert "(30.0 MB of it in files deleted but still held open), over" in watch.verdict(("hog", 1))


_HOLDER = ("import os, sys, time\n"
           "f = open(sys.argv[1], 'wb'); os.unlink(f.name); f.write(os.urandom(5 << 20)); f.flush(); os.fsync(f.fileno())\n"
           "print('ready', flush=True); time.sleep(60)\n")
_SCAN = ("import sys; sys.path.insert(0, sys.argv[2])\n"
         "from zen.agent.diskquota import held_deleted\n"
         "print(sum(held_deleted({('job', 1): sys.argv[1]}).values()))\n")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv: two users")
def test_the_agents_capabilities_read_what_a_container_user_holds_deleted():
    """On a VM the agent runs as zen-agent with the unit's capabilities (startup.sh) and a job's container as
    nobody: another user's descriptors are readable with CAP_SYS_PTRACE only, so with CAP_DAC_OVERRIDE alone
    no deleted file of a job in a container was ever counted."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    top = Path(tempfile.mkdtemp(prefix="zen-held-", dir="/tmp"))  # pytest's own is root's alone: nobody's too
    root = top / "job-1"
    (root / "outputs").mkdir(parents=True)
    for folder in (top, root, root / "outputs"):
        folder.chmod(0o777)
    shared = str(Path(__file__).resolve().parents[2] / "shared")
    job = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                            _HOLDER, str(root / "outputs" / "scratch")], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "ready"

        def scan(caps: str) -> int:
            agent = subprocess.run(["setpriv", "--reuid=999", "--regid=999", "--clear-groups", f"--inh-caps={caps}",
                                    f"--ambient-caps={caps}", f"--bounding-set=-all,{caps}", sys.executable, "-c",
                                    _SCAN, str(root), shared], capture_output=True, text=True, timeout=60)
            assert agent.returncode == 0, agent.stderr
            return int(agent.stdout.strip())

        assert scan("+dac_override,+sys_ptrace") >= 5 << 20  # the unit's
        assert scan("+dac_override") == 0  # before
    finally:
        job.kill()
        job.wait()
        shutil.rmtree(top, ignore_errors=True)
