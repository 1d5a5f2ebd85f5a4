"""Small helpers shared by the agent tests: bounded waits and process checks."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.waiting import wait_for  # noqa: F401  (re-exported for the agent tests)

JOBSCRIPT = str(Path(__file__).with_name("jobscript.py"))


def job_command(*args: str) -> list[str]:
    """The argv of a test job (see jobscript.py)."""
    return [sys.executable, JOBSCRIPT, *args]


def alive(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie waiting to be reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def read_pid(path: Path, timeout_s: float = 10.0) -> int:
    return int(wait_for(lambda: path.exists() and path.read_text().strip(), timeout_s, what=f"pid in {path}"))


def one_running(reports: list) -> list:
    """Reports with each run of RUNNING heartbeats counted once: a job reports RUNNING every
    ``heartbeat_s``, and on a loaded machine its short run may span one more of them."""
    return [r for i, r in enumerate(reports) if not (i and r == reports[i - 1] and "RUNNING" in r)]


def names_a_save(bucket, name: str) -> bool:
    """Whether the checkpoint manifest ``name`` names a save (not a rerun's claim, naming none), as it is now: read
    unpinned (a blob listed at one generation may be replaced before its download: a 404, not "not yet")."""
    from google.api_core.exceptions import NotFound

    try:
        return "generation" in json.loads(bucket.blob(name).download_as_bytes())
    except NotFound:
        return False
