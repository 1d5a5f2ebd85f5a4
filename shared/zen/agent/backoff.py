"""How long the agent waits before its next pull after Zen refused its claims (issue 34, no storms).

A refusal saying ``draining`` retires the agent (``DailyPulls.retire``); one saying ``outranked`` (Zen offers
this VM a job of higher priority instead: ``zen.jobs.claims.outranked``) makes the next pull wait up to
``OFFER_WAIT_S`` for that offer, taken as soon as it comes; one for any other cause makes the next pull wait
``FIRST_S``, doubled per refusal of that cause in a row, at most ``MOST_S``. A RELEASE without the ``refused``
attribute changes nothing. Shared by the attempts' threads of a VM.
Why: docs/reference/agent.md#the-loop-and-the-claim
"""

from __future__ import annotations

import threading
from typing import Callable

FIRST_S = 1.0
MOST_S = 30.0
DRAINING = "draining"  # zen.jobs.claims.DRAINING (the agent does not import Zen's side)
OUTRANKED = "outranked"  # zen.jobs.claims.OUTRANKED
OFFER_WAIT_S = 5.0  # Zen publishes the offer after the RELEASE, in the same second unless Pub/Sub is slow


class ClaimBackoff:
    def __init__(self, clock: Callable[[], float], first_s: float = FIRST_S, most_s: float = MOST_S):
        self._clock, self._first_s, self._most_s = clock, first_s, most_s
        self._cause: str | None = None
        self._in_a_row = 0
        self._until = 0.0
        self._offer_until = 0.0
        self._lock = threading.Lock()

    def outranked(self) -> None:
        """A claim refused for a job of higher priority, offered to this VM: the next pull waits for it a while."""
        with self._lock:
            self._offer_until = self._clock() + OFFER_WAIT_S

    def offer_wait(self) -> float:
        """The seconds the next pull still waits for an offer (``outranked``; 0: none is awaited)."""
        with self._lock:
            return max(0.0, self._offer_until - self._clock())

    def offer_taken(self) -> None:
        with self._lock:
            self._offer_until = 0.0

    def refused(self, cause: str) -> float:
        """A claim refused for ``cause``: the seconds the next pull waits."""
        with self._lock:
            self._in_a_row = self._in_a_row + 1 if cause == self._cause else 1
            self._cause = cause
            wait = min(self._first_s * 2 ** (self._in_a_row - 1), self._most_s)
            self._until = self._clock() + wait
            return wait

    def confirmed(self) -> None:
        with self._lock:
            self._cause, self._in_a_row, self._until, self._offer_until = None, 0, 0.0, 0.0

    def waiting(self) -> bool:
        """Whether the next pull must wait still."""
        with self._lock:
            return self._clock() < self._until
