"""An advisory lock held on one connection, as its block holds it (``zen.store.db.Database.session_lock``).

The lock lives on one connection that stands idle while the block runs; with a hold limit, Postgres ends that
connection once idle that long (``idle_session_timeout``), and the lock with it. The block's own thread does not
know: a request cut at its function's timeout stands still (throttled) and goes on where it was once the instance
gets the CPU again, after another tick or pass may have taken the lock and done the same work. ``lost()`` tells
it, asked on another connection (a statement on the lock's own would restart its idle clock, lengthening the hold)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Callable


class Lease:
    def __init__(self, taken: bool, holds: Callable[[], bool] | None = None):
        """``holds()``: whether the lock's connection (its backend: its pid and start, a pid alone being reused by a
        later backend, as a failed-over server's new ones are numbered afresh) still holds an advisory lock, asked on
        another; None: held without a limit, never ended by Zen's doing."""
        self._taken, self._holds = taken, holds

    def __bool__(self) -> bool:
        return self._taken

    def lost(self) -> bool:
        """Taken, and no longer held: its connection was ended (by the hold limit, or lost)."""
        if not self._taken or self._holds is None:
            return False
        return not self._holds()


def backend_holds(session: Callable[[], AbstractContextManager[Any]], pid: int, started: datetime) -> bool:
    """Whether backend ``pid`` begun at ``started`` (a lock's connection) still holds an advisory lock, asked on a
    ``session()`` of its own (``zen.store.db.Database.session``)."""
    with session() as other:
        return bool(other.sql(
            "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype ="
            " 'advisory' AND l.granted AND l.pid = :pid AND a.backend_start = :started) AS held",
            pid=pid, started=started)[0]["held"])
