"""Random draws and injected faults: boot delays, quota limits, API rate limiting, regional outages (5xx).

Each uses its own seeded ``random.Random`` so that, for example, the number of API calls a test
makes does not change the boot delays it sees.
"""

from __future__ import annotations

import math
import random
import threading
from typing import Callable

from zen_dev.local.compute.resources import ApiError
from zen_dev.capacity.scenario import (
    BootSpec,
    FixedBoot,
    LognormalBoot,
    OutageSpec,
    QuotaSpec,
    RateLimitSpec,
    UniformBoot,
)


class BootDelay:
    """Draws boot delays (cloud seconds) from the scenario's distribution."""

    def __init__(self, spec: BootSpec, rng: random.Random):
        self.spec = spec
        self.rng = rng

    def draw(self) -> float:
        spec = self.spec
        if isinstance(spec, FixedBoot):
            return spec.s
        if isinstance(spec, LognormalBoot):
            return math.exp(math.log(spec.median_s) + spec.sigma * self.rng.gauss(0.0, 1.0))
        if isinstance(spec, UniformBoot):
            return self.rng.uniform(spec.low_s, spec.high_s)
        raise TypeError(f"unknown boot distribution {spec!r}")


class QuotaRules:
    """``QUOTA_EXCEEDED`` limits per region (and machine type) during time windows."""

    def __init__(self, rules: list[QuotaSpec]):
        self.rules = rules

    def blocking_rule(
        self, region: str, machine_type: str, t: float, in_use: Callable[[str, str | None], int]
    ) -> QuotaSpec | None:
        """The rule that forbids one more VM of ``machine_type`` in ``region`` now, if any.
        ``in_use(region, machine_type or None)`` counts the VMs a rule covers."""
        for rule in self.rules:
            if rule.region != region or not rule.contains(t):
                continue
            if rule.machine_type is not None and rule.machine_type != machine_type:
                continue
            if in_use(region, rule.machine_type) >= rule.limit:
                return rule
        return None

    @staticmethod
    def message(rule: QuotaSpec) -> str:
        return f"Quota '{rule.metric}' exceeded.  Limit: {float(rule.limit)} in region {rule.region}."


class RateLimiter:
    """Decides which API calls are answered ``403 rateLimitExceeded`` (what Compute Engine answers a
    project over a rate quota: cloud.google.com/compute/api-quota; not 429)."""

    def __init__(self, spec: RateLimitSpec, rng: random.Random):
        self.spec = spec
        self.rng = rng
        self._lock = threading.Lock()
        self.limited = 0

    def check(self, method: str, t: float) -> None:
        """Raise the 403 :class:`ApiError` when this call is to be rate limited."""
        spec = self.spec
        if spec.methods is not None and method not in spec.methods:
            return
        hit = any(w.contains(t) for w in spec.windows)
        if not hit and spec.fraction > 0:
            with self._lock:
                hit = self.rng.random() < spec.fraction
        if hit:
            with self._lock:
                self.limited += 1
            raise ApiError(403, "rateLimitExceeded", "Rate Limit Exceeded")


class Outages:
    """Decides which API calls are answered ``503 backendError``: a region's Compute API down for a
    while (the client raises ``ServiceUnavailable``, which google-cloud-compute retries by default)."""

    def __init__(self, specs: list[OutageSpec]):
        self.specs = specs
        self._lock = threading.Lock()
        self.refused = 0

    def check(self, method: str, region: str | None, t: float) -> None:
        """Raise the 503 :class:`ApiError` when this call falls in an outage."""
        for spec in self.specs:
            if (spec.region is None or spec.region == region) and (spec.methods is None or method in spec.methods) \
                    and spec.contains(t):
                with self._lock:
                    self.refused += 1
                raise ApiError(503, "backendError", "The service is currently unavailable.")
