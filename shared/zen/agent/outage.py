"""An agent whose pulls keep failing says nothing rather than IDLE (``Agent._vm_beat``).

An agent that cannot pull its start subscription (NotFound: the subscription is missing;
PermissionDenied: its service account lost the role) can never take a job. Yet its VM heartbeats
said IDLE, and the planner counts an IDLE VM as supply covering the queued jobs of its region: those
jobs waited for ever while the VM was billed. So once pulls have failed for ``PULL_OUTAGE_S`` without
a success, the agent sends no VM heartbeat that would say IDLE. Silent, the VM is no supply after
``zen.core.lease.agent_silence_s`` (180 s by default) and, holding no job, is deleted; the planner
asks for another VM where the queue needs one. Heartbeats that are not IDLE still go (BUSY naming the
attempts it runs, RETIRED, STOPPING): those are true, and no queued job counts on them. As soon as a
pull succeeds the agent says IDLE again at once.

Why silence and not exiting non-zero: systemd restarts a failed agent (``Restart=on-failure``,
5 s later; ``startup.sh``), and every start says IDLE at once, so a crash loop would keep the VM heard,
and idle, for ever. Silence lets the control plane's own rule remove it, and a pull failing for a
minute (a Pub/Sub hiccup the transport's retries did not cover) costs nothing: the agent resumes.

Why 120 s: two VM heartbeats at the default 60 s (``ZEN_AGENT_VM_HEARTBEAT_S``). Shorter, a brief
Pub/Sub outage would cost a VM (a new one boots for minutes); longer, the planner keeps trusting
the VM for this bound plus its 180 s of silence. A transient error is retried inside one pull (up
to 30 s, ``zen.agent.transport``); a permanent one fails at once and the loop retries it with backoff
(at most 60 s apart), so 120 s is always several failed pulls in a row, never one.
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
