"""What the agent reads of a job's image pull (``zen.agent.imagepull``) on docker's terminal, where docker redraws
each layer's line in place and ends each redraw with a cursor move (``ESC[1B``):

- the RUNNING heartbeat, and the note of a pull cancelled for want of progress, name docker's last line: they said
  "last progress 0 s ago (\\x1b[1B)", pull after pull, the cursor move docker wrote last;
- a line redrawn as it was is no progress: with the containerd image store the daemon resends each download's count
  every 100 ms, moved or not, and docker redraws it; a pull whose registry stopped sending mid-layer looked busy for
  ever, the attempt RUNNING on a billed VM, its ``ZEN_AGENT_PULL_STALL_S`` never reached."""

from __future__ import annotations

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_container_ends_named import IMAGE
from tests.waiting import wait_for
from zen.agent.imagepull import Pull


def test_the_pull_names_dockers_last_line_not_its_cursor_moves(tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.pulls(lines=3, every_s=0.05, stalls=True)  # three redraws, then silence
    pulling = Pull(IMAGE, docker.path)
    try:
        wait_for(lambda: pulling.heard > pulling.began and pulling.silent_s() >= 0.5, 30,
                 what="docker's three lines read, then silence")
        assert pulling.last == "2: Downloading [==>] 2MB", repr(pulling.last)
        assert "\x1b" not in pulling.describe(), repr(pulling.describe())
    finally:
        pulling.stop()


def test_a_line_redrawn_unchanged_is_no_progress(tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.pulls(lines=3, every_s=0.05, stalls=True, redraws=True)  # then "2: ..." again and again, unmoved
    pulling = Pull(IMAGE, docker.path)
    try:
        wait_for(lambda: pulling.heard > pulling.began and pulling.silent_s() >= 0.5, 15,
                 what="no progress heard while docker redraws an unmoved count")
        assert pulling.last == "2: Downloading [==>] 2MB", repr(pulling.last)
        assert pulling.process.poll() is None  # docker still redrawing: it is the agent that reads no progress
    finally:
        pulling.stop()
