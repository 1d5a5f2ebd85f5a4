"""The VM's heartbeats: what the VM says of itself every ``ZEN_AGENT_VM_HEARTBEAT_S`` (RETIRED, BUSY or
IDLE as it is; the attempts it runs, the starts it dropped unanswered or released, what its warm cache holds), and
at once when its state changed. Never IDLE while pulls have been failing too long (``zen.agent.outage``).
Called from the loop and from every attempt's thread.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from zen.agent.cache import InputCache
from zen.agent.limits import DailyPulls
from zen.agent.outage import PullOutage
from zen.agent.reports import Reporter
from zen.agent.shutdown import Shutdown
from zen.agent.slots import Slots
from zen.core.models import VmState


class VmBeats:
    def __init__(self, reporter: Reporter, slots: Slots, cache: InputCache, pulls: DailyPulls, outage: PullOutage,
                 shutdown: Shutdown, clock: Callable[[], float], period_s: float,
                 log: logging.LoggerAdapter[logging.Logger]) -> None:
        self._reporter = reporter
        self._slots = slots
        self._cache = cache
        self._pulls = pulls
        self._outage = outage
        self._shutdown = shutdown
        self._clock = clock
        self._period_s = period_s
        self._log = log
        self._next = 0.0  # when the next is due (the clock's)
        # Asked for now (``due``), unlocked: one asked for while another thread sends a heartbeat outlives its end.
        self._due = False
        # RETIRED from now on: the loop takes no more jobs (Agent._retire); from the first word, never IDLE, when
        # retired before the loop began (by an earlier agent of the boot: zen.agent.retired; a container left).
        self.retired = pulls.exhausted() is not None
        self._lock = threading.Lock()  # from every attempt's thread

    def due(self) -> None:
        """The next heartbeat goes at the loop's next look, not a period later (also when asked for while another
        thread sends one: that one set its next a period later as it ended, over the ask, and a VM retiring said
        BUSY for a period more)."""
        self._due = True

    def retire(self) -> None:
        self.retired = True

    def beat(self, state: VmState | None = None, *, force: bool = False) -> None:
        """The VM heartbeat when due (or ``force``): ``state``, else RETIRED, BUSY or IDLE as it is,
        naming the attempts it runs, those whose start it dropped (unanswered or released), and what its warm
        cache holds. Never IDLE while pulls have been failing too long (``zen.agent.outage``): nothing then."""
        with self._lock:
            now = self._clock()
            if force or self._due or now >= self._next:
                self._due = False  # (before the state is read: an ask after it is this one's or the next's)
                held = self._slots.held()
                state = state or (VmState.RETIRED if self.retired else VmState.BUSY if held else VmState.IDLE)
                if state is VmState.IDLE and (failing := self._outage.mutes_idle()) is not None:
                    if now >= self._next:  # once per period: the loop comes here often
                        self._log.warning("start pulls keep failing: no IDLE heartbeat (Zen deletes a silent VM)",
                                          extra={"failing_for_s": round(failing)})
                    self._next = now + self._period_s
                    return
                self._reporter.vm(state, budget_s=10.0, held=held, list_all=self._slots.capacity.shared,
                                  cached=self._cache.report(), given_back=self._slots.given_back)
                self._next = now + self._period_s

    def changed(self) -> None:
        """A VM heartbeat now, the VM's state having changed (unless the loop says RETIRED next)."""
        if not self._shutdown.stopping and (self.retired or not self._pulls.exhausted()):
            self.beat(force=True)
