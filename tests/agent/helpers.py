"""Small helpers shared by the agent tests: bounded waits and process checks."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

JOBSCRIPT = str(Path(__file__).with_name("jobscript.py"))


def job_command(*args: str) -> list[str]:
    """The argv of a test job (see jobscript.py)."""
    return [sys.executable, JOBSCRIPT, *args]


def wait_for(predicate, timeout_s: float = 20.0, interval_s: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout_s}s")
        time.sleep(interval_s)


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
