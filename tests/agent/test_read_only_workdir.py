"""A job's container has a read-only root (``zen.agent.container``), its working directory, the image's WORKDIR,
included: a training script that saves ``./checkpoints``, or Lightning's ``./lightning_logs`` (its default root is
the working directory), fails with "OSError: [Errno 30] Read-only file system", where a plain ``docker run`` as root
runs. Its final report says so first, and where it may write (``exit_note``). Against a stand-in docker."""

from __future__ import annotations

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_confinement import BIG, spec
from zen.agent.container import Sandbox
from zen.agent.runner import RunningJob

LIGHTNING = ("Traceback (most recent call last):\n"
             '  File "/usr/local/lib/python3.10/dist-packages/lightning/fabric/loggers/tensorboard.py", line 190, in '
             "experiment\n    self._fs.makedirs(self.root_dir, exist_ok=True)\n"
             "OSError: [Errno 30] Read-only file system: '/workspace/lightning_logs'\n")


def end_of(tmp_path, sandbox: Sandbox, code: int = 1, stderr: str = LIGHTNING):
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(code, stderr)
    return RunningJob.start(spec((0,), sandbox=sandbox), local=False, docker=docker.path).outcome()


def test_a_job_that_wrote_to_its_read_only_root_is_told_where_it_may_write(tmp_path):
    outcome = end_of(tmp_path, Sandbox(shape=BIG))
    assert outcome.exit_code == 1
    note = outcome.note or ""
    assert note.startswith("zen: exit code 1, after the job wrote where its container is read-only: its root, "), note
    assert "WORKDIR" in note and "ZEN_OUTPUT_DIR" in note and "/tmp" in note
    assert "Read-only file system" in outcome.tail  # the job's own line stays in its output


def test_no_note_where_the_root_is_writable_or_the_job_said_nothing_of_it(tmp_path):
    assert end_of(tmp_path / "rw", Sandbox(shape=BIG, read_only_root=False)).note is None  # the cluster opted out
    assert end_of(tmp_path / "other", Sandbox(shape=BIG), stderr="ValueError: bad config\n").note is None
    assert end_of(tmp_path / "ok", Sandbox(shape=BIG), code=0).note is None  # it carried on and succeeded
