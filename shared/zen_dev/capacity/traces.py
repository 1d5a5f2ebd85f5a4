"""GPU capacity per (zone, machine type) over time. Pure: no clock, no I/O except trace loading.

A :class:`CapacitySchedule` answers how many VMs of a machine type can exist in a zone at time
``t``, from steps (``add_steps``) and replayed traces (``add_trace``, ``load_trace``:
``../shared/traces/gcp-a100-availability`` JSON, next to the repository); the Compute stand-in and the simulator share it.
Rules and the trace format: docs/reference/simulator.md#capacity-schedules-and-traces
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

UNLIMITED = 1_000_000_000
"""Capacity meaning "no limit". An int, so ``capacity - used`` still works."""

_ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]\Z")


def is_unlimited(value: int) -> bool:
    return value >= UNLIMITED


class TraceError(ValueError):
    """A capacity trace file is missing or malformed."""


@dataclass(frozen=True)
class CapacityTrace:
    """One zone's capacity samples, ``gap_seconds`` apart, starting at trace time 0."""

    zone: str | None
    gap_seconds: float
    data: tuple[int, ...]

    @property
    def duration_s(self) -> float:
        return self.gap_seconds * len(self.data)


def trace_zone_from_filename(path: str | os.PathLike) -> str | None:
    """``us-west1-b_a100_40gb_8.json`` -> ``us-west1-b``; None when the name has no zone prefix."""
    head = Path(path).name.split("_", 1)[0]
    if head.endswith(".json"):
        head = head[: -len(".json")]
    return head if _ZONE.match(head) else None


def _finite_number(value: object) -> bool:
    """An int or a finite float (Python's json reads ``NaN`` and ``Infinity``), not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and math.isfinite(value)


def load_trace(path: str | os.PathLike) -> CapacityTrace:
    """Read a trace file; raises :class:`TraceError` with the reason when it cannot be used."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise TraceError(f"trace file {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise TraceError(f"trace file {path} is not readable JSON: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise TraceError(f"trace file {path} has no 'data' list")
    gap = (raw.get("metadata") or {}).get("gap_seconds")
    if not _finite_number(gap) or not gap > 0:
        raise TraceError(f"trace file {path}: metadata.gap_seconds must be a finite number > 0, got {gap!r}")
    data = raw["data"]
    if not data:
        raise TraceError(f"trace file {path} has an empty 'data' list")
    for i, value in enumerate(data):
        if not _finite_number(value) or not value >= 0:
            raise TraceError(f"trace file {path}: data[{i}] must be a finite number >= 0, got {value!r}")
    return CapacityTrace(zone=trace_zone_from_filename(path), gap_seconds=float(gap), data=tuple(data))


class StepSeries:
    """A piecewise-constant function of cloud time.

    ``times`` (ascending, in the series' own time base) and ``values`` describe the steps; cloud
    time ``t`` maps to series time ``t + shift``, wrapped modulo ``period`` when given. Before the
    first step the value is ``before`` (None: the schedule's default).
    """

    def __init__(
        self,
        times: Sequence[float],
        values: Sequence[int],
        *,
        before: int | None = None,
        shift: float = 0.0,
        period: float | None = None,
    ):
        if len(times) != len(values) or not times:
            raise ValueError("a step series needs as many times as values, at least one")
        if any(b <= a for a, b in zip(times, times[1:])):
            raise ValueError("step times must be strictly increasing")
        if period is not None and (period <= 0 or times[0] != 0 or times[-1] >= period):
            raise ValueError("a periodic series starts at 0 and its steps lie within the period")
        # Drop steps that do not change the value, so every remaining time is a real change.
        kept_t, kept_v = [times[0]], [values[0]]
        for t, v in zip(times[1:], values[1:]):
            if v != kept_v[-1]:
                kept_t.append(t)
                kept_v.append(v)
        self.times = tuple(float(t) for t in kept_t)
        self.values = tuple(int(v) for v in kept_v)
        self.before = before
        self.shift = float(shift)
        self.period = period

    def value_at(self, t: float) -> int | None:
        u = t + self.shift
        if self.period is not None:
            u = u % self.period
        i = bisect.bisect_right(self.times, u) - 1
        return self.before if i < 0 else self.values[i]

    def next_change(self, after_t: float) -> float | None:
        """The first cloud time > ``after_t`` at which the value may change, or None."""
        u = after_t + self.shift
        if self.period is None:
            i = bisect.bisect_right(self.times, u)
            if i >= len(self.times):
                return None
            if i == 0 and self.before is not None and self.before == self.values[0]:
                i = 1
                if i >= len(self.times):
                    return None
            return self.times[i] - self.shift
        base = math.floor(u / self.period) * self.period
        r = u - base
        i = bisect.bisect_right(self.times, r)
        if i < len(self.times):
            return base + self.times[i] - self.shift
        wraps = self.values[-1] != self.values[0]
        if wraps:
            return base + self.period - self.shift
        if len(self.times) > 1:
            return base + self.period + self.times[1] - self.shift
        return None


class CapacitySchedule:
    """Capacity per (zone, machine type) over cloud time; see the module docstring."""

    def __init__(self, default: int = UNLIMITED):
        if default < 0:
            raise ValueError("default capacity must be >= 0")
        self.default = int(default)
        self._series: dict[tuple[str, str | None], StepSeries] = {}

    def set_series(self, zone: str, machine_type: str | None, series: StepSeries) -> None:
        key = (zone, machine_type)
        if key in self._series:
            raise ValueError(f"capacity for {zone}/{machine_type or '*'} is already defined")
        self._series[key] = series

    def zones(self) -> set[str]:
        """The zones some series gives the capacity of."""
        return {zone for zone, _ in self._series}

    def add_steps(
        self, zone: str, machine_type: str | None, steps: Iterable[tuple[float, int]]
    ) -> None:
        """Scripted steps ``(at_s, capacity)``; before the first step the default applies."""
        ordered = sorted((float(t), int(c)) for t, c in steps)
        if any(c < 0 for _, c in ordered):
            raise ValueError("capacity must be >= 0")
        self.set_series(zone, machine_type, StepSeries([t for t, _ in ordered], [c for _, c in ordered]))

    def add_trace(
        self,
        zone: str,
        machine_type: str | None,
        trace: CapacityTrace,
        *,
        scale: float = 1.0,
        offset_s: float = 0.0,
        loop: bool = False,
    ) -> None:
        """Replay ``trace``: cloud time ``t`` reads trace time ``t + offset_s``; values times
        ``scale`` (rounded down). After the end the last value holds, or the trace repeats."""
        values = [int(math.floor(v * scale + 1e-9)) for v in trace.data]
        times = [i * trace.gap_seconds for i in range(len(values))]
        period = trace.duration_s if loop else None
        series = StepSeries(times, values, before=values[0], shift=offset_s, period=period)
        self.set_series(zone, machine_type, series)

    @staticmethod
    def _fallbacks(zone: str, machine_type: str) -> list[tuple[str, str | None]]:
        """The series a key reads, first that has started first: its own; for one model's own capacity
        (``<machine type>@<model>``) the model's zone-wide one, then the machine type's; the zone's. A model's
        zone-wide series (``@<model>``, shared by every machine type) has no machine type to fall back to."""
        keys: list[tuple[str, str | None]] = [(zone, machine_type)]
        base, at, model = machine_type.partition("@")
        if at and base:
            keys += [(zone, f"@{model}"), (zone, base)]
        return keys + [(zone, None)]

    def capacity(self, zone: str, machine_type: str, t_seconds: float) -> int:
        for key in self._fallbacks(zone, machine_type):
            series = self._series.get(key)
            value = series.value_at(t_seconds) if series is not None else None
            if value is not None:
                return value
        return self.default

    def next_change(self, zone: str, machine_type: str, after_t: float) -> float | None:
        """First cloud time > ``after_t`` where the capacity of this key may change, or None."""
        times = [
            t for key in self._fallbacks(zone, machine_type)
            if (series := self._series.get(key)) is not None
            and (t := series.next_change(after_t)) is not None
        ]
        return min(times, default=None)

    def keys(self) -> list[tuple[str, str | None]]:
        """The (zone, machine type or None) pairs that have a series."""
        return list(self._series)

    def zones(self) -> set[str]:
        return {zone for zone, _ in self._series}
