"""Clocks for the Compute stand-in. They count cloud seconds since the scenario started.

- :class:`ScaledClock` follows real time times ``time_scale`` (``time_scale=60``: one real second
  is one cloud minute). Used when the stand-in runs as a server.
- :class:`ManualClock` only moves when told to, so tests advance cloud time deterministically
  without sleeping.

Any object with ``now() -> float`` works as a clock. ``real_seconds(cloud_s)`` says how long a
cloud duration lasts in real time, or None when the clock has no relation to real time.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class ScaledClock:
    """Real monotonic time times ``time_scale``, starting at ``start`` cloud seconds."""

    def __init__(self, time_scale: float = 1.0, start: float = 0.0):
        if time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        self.time_scale = float(time_scale)
        self._start = float(start)
        self._t0 = time.monotonic()

    def now(self) -> float:
        return self._start + (time.monotonic() - self._t0) * self.time_scale

    def real_seconds(self, cloud_seconds: float) -> float | None:
        return cloud_seconds / self.time_scale


class ManualClock:
    """A clock that stands still until :meth:`advance` or :meth:`set` moves it forward."""

    def __init__(self, start: float = 0.0):
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, t: float) -> float:
        with self._lock:
            if t < self._now:
                raise ValueError(f"time only moves forward (now {self._now}, asked {t})")
            self._now = float(t)
            return self._now

    def real_seconds(self, cloud_seconds: float) -> float | None:
        return None
