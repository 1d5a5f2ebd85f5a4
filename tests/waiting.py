"""The one polling helper the tests share: every wait has a timeout."""

from __future__ import annotations

import time


def wait_for(predicate, timeout_s: float = 20.0, interval_s: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout_s}s")
        time.sleep(interval_s)
