"""An advisory lock held on one connection, as its block holds it (``zen.store.db.Database.session_lock``).

The lock lives on one connection that stands idle while the block runs; with a hold limit, Postgres ends that
connection once idle that long (``idle_session_timeout``), and the lock with it. The block's own thread does not
know: a request cut at its function's timeout stands still (throttled) and goes on where it was once the instance
gets the CPU again, after another tick or pass may have taken the lock and done the same work. ``lost()`` tells
it, asked on another connection (a statement on the lock's own would restart its idle clock, lengthening the hold)."""

from __future__ import annotations

from typing import Callable


class Lease:
    def __init__(self, taken: bool, pid: int | None = None, holds: Callable[[int], bool] | None = None):
        """``pid``: the lock's connection's backend (None: held without a limit, never ended by Zen's doing);
        ``holds(pid)``: whether that backend still holds an advisory lock."""
        self._taken, self._pid, self._holds = taken, pid, holds

    def __bool__(self) -> bool:
        return self._taken

    def lost(self) -> bool:
        """Taken, and no longer held: its connection was ended (by the hold limit, or lost)."""
        if not self._taken or self._pid is None or self._holds is None:
            return False
        return not self._holds(self._pid)
