"""The scale tick's job-side sweeps, kept going beside its scaling step (``Zen.on_scale_tick``).

Ticks run one at a time (one instance serving one request at once, and the tick lock), and each sweeps before it
scales: the tick's Compute time (every MIG of every cluster read, then each cluster's writes, each call bounded,
8 at a time: minutes with many MIGs while Compute answers slowly, up to the function's timeout) set how far apart
the sweeps came. A job whose VM had died was requeued minutes late, and later still once the sweep, seeing its
ticks minutes apart, took the wait for an outage of Zen's and counted every silence afresh (``record_tick``); a
STOPPING job whose VM was gone stayed STOPPING as long. So while the scaling step runs, a thread of the tick's own
sweeps again every ``SWEEP_BESIDE_S``, as the next ticks would have. It does nothing once the tick is past its
function's timeout (the next tick sweeps then), nor after the scaling step returns. Its connection is one of the
tick's ``ZEN_DB_MAX_OPEN``: the scaling step holds its third only in a pass's short transactions, and a sweep, or
that transaction, that finds them all in use waits for one (``zen.store.db.Database``)."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Callable, Iterator

log = logging.getLogger("zen.jobs.service")

# Seconds between the sweeps beside a scaling step: the tick's schedule (Cloud Scheduler, every minute).
SWEEP_BESIDE_S = 60.0


@contextlib.contextmanager
def sweeping_beside(sweep: Callable[[], None], every_s: float, past_timeout: Callable[[], bool]) -> Iterator[None]:
    """Run ``sweep`` every ``every_s`` on a thread of its own while the block runs, never once ``past_timeout()``;
    a sweep that fails is logged, and the next one comes a period later. The block's end waits for a sweep under
    way (each of its statements bounded by the query timeout)."""
    done = threading.Event()

    def sweeps() -> None:
        while not done.wait(every_s) and not past_timeout():
            try:
                sweep()
            except Exception:  # noqa: BLE001 - logged; the scaling step goes on, and so does the next sweep
                log.exception("a sweep beside the scaling step failed")

    thread = threading.Thread(target=sweeps, name="zen-tick-sweeps", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
