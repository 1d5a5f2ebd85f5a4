"""The VM's shutdown, as the agent's parts see it: whether it was asked for, why, and how much of its one
deadline is left. A shutdown has one deadline: ``SHUTDOWN_S`` past the job's stop grace
(``ZEN_AGENT_STOP_GRACE_S``), from the request, every final report is sent; each step takes what is left
of it, keeping the time of the steps after it.
Why these figures: docs/reference/agent.md (startup.sh's ``TimeoutStopSec``)
"""

from __future__ import annotations

import math
from typing import Callable

SLICE_S = 0.2  # longest uninterrupted wait: how fast a shutdown request is noticed
SHUTDOWN_BUDGET_S = 5.0  # per report while shutting down, at most (a preempted VM has ~30 s in all)
# systemd kills the agent at the grace + 15 s (TimeoutStopSec, startup.sh): VM_STOPPING_S of the rest go
# to the VM's STOPPING, the last to closing the control stream.
SHUTDOWN_S = 10.0
VM_STOPPING_S = 2.0


class Shutdown:
    """Asked for once (a signal, the VM's preemption, a test); read by the loop, the claims and the attempts."""

    def __init__(self, clock: Callable[[], float], stop_grace_s: float) -> None:
        self._clock = clock
        self._stop_grace_s = stop_grace_s
        self.reason: str | None = None
        self._at: float | None = None  # when asked for (the clock's): the deadline counts from it

    def request(self, reason: str) -> None:
        """Safe from a signal handler or another thread: only sets fields the others poll."""
        if self.reason is None:
            self._at = self._clock()
            self.reason = reason

    @property
    def stopping(self) -> bool:
        return self.reason is not None

    def left(self, keep_s: float = 0.0) -> float:
        """Seconds left until the shutdown's deadline (``SHUTDOWN_S`` past the stop grace, from the
        request), less ``keep_s`` kept for the steps after; infinite while not shutting down."""
        if self._at is None:
            return math.inf
        return self._at + self._stop_grace_s + SHUTDOWN_S - keep_s - self._clock()

    def budget(self, keep_s: float) -> float:
        """One report's budget while shutting down: what is left before ``keep_s`` of the deadline, at most
        ``SHUTDOWN_BUDGET_S``, and one second at least (late is better than never; systemd has the last word)."""
        return min(SHUTDOWN_BUDGET_S, max(1.0, self.left(keep_s)))
