"""The agent's work directory after a crash: the attempt directories a dead agent left are removed when
the next one starts (``Agent._sweep_work_dir``, before its first pull): those whose lock no live agent
holds, and a ``<name>.new`` only once older than ``MAKING_S``; never the cache, the journal of final
reports, a link, or anything outside the work directory.
Why: docs/reference/agent.md#final-reports-outlive-the-agent
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import time
from pathlib import Path

ATTEMPT_DIR = re.compile(r"[A-Za-z0-9_.-]+-[0-9a-f]{12}-[0-9]+(-node-[0-9]+)?(?P<new>\.new)?")  # AttemptData.root
MAKING_S = 60.0  # a <name>.new older than this was left by a crash between its mkdir and its rename


def sweep_work_dir(work_dir: Path, cache_path: Path, log: logging.Logger | logging.LoggerAdapter) -> None:
    """Remove what a dead agent left in ``work_dir`` (the rules above); never raises."""
    work, cache = work_dir.resolve(), cache_path.resolve()
    try:
        found = [e.name for e in os.scandir(work) if (named := ATTEMPT_DIR.fullmatch(e.name))
                 and e.is_dir(follow_symlinks=False)
                 and (not named["new"] or time.time() - e.stat(follow_symlinks=False).st_mtime > MAKING_S)]
    except OSError:
        return  # no work directory yet
    for name in found:
        path = work / name
        if path == cache or path in cache.parents:
            continue
        if (held := lock_unheld(path)) is None:  # gone, or a live agent's attempt
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            log.warning("attempt directory left by an agent that died removed", extra={"path": str(path)})
        finally:
            os.close(held)


def lock_unheld(path: Path) -> int | None:
    """The directory ``path`` locked (``flock``; the lock goes with the returned descriptor), unless no such directory
    is there (or it is a link) or a live agent holds its lock: None then."""
    try:
        held = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a live agent's attempt
    except OSError:
        os.close(held)
        return None
    return held
