"""An agent whose pulls keep failing says nothing rather than IDLE (``zen.agent.vmbeat.VmBeats.beat``).

Once pulls of the start subscription have failed for ``PULL_OUTAGE_S`` without a success, the agent
sends no VM heartbeat that would say IDLE (others still go), so Zen stops counting the VM as supply
and deletes it; the first pull that works makes it say IDLE again.
Why silence, and why 120 s: docs/reference/agent.md#when-pulls-fail
"""

from __future__ import annotations

from typing import Callable

PULL_OUTAGE_S = 120.0  # pulls failing this long: no more IDLE heartbeats (see above)


class PullOutage:
    """How long the start subscription's pulls have been failing, by the agent's clock (thread-safe
    enough: only the agent loop changes it; ``mutes_idle`` only reads)."""

    def __init__(self, clock: Callable[[], float], bound_s: float = PULL_OUTAGE_S):
        self._clock = clock
        self._bound_s = bound_s
        self._since: float | None = None  # the first failure since the last success

    def failed(self) -> None:
        if self._since is None:
            self._since = self._clock()

    def succeeded(self) -> float | None:
        """A pull worked: the outage (if any) is over. Returns how long it lasted, if it had muted IDLE."""
        lasted, self._since = self.mutes_idle(), None
        return lasted

    def mutes_idle(self) -> float | None:
        """How long pulls have been failing, when that is past the bound (no IDLE may be said); else None."""
        since = self._since
        if since is None:
            return None
        lasted = self._clock() - since
        return lasted if lasted >= self._bound_s else None
