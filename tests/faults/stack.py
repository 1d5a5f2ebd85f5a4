"""What the fault scenarios through the whole local stack share: waiting for a condition."""

from __future__ import annotations

import time


def until(what, timeout_s: float, step_s: float = 0.3):
    """``what()`` once it is truthy, polled every ``step_s``; None after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (value := what()):
            return value
        time.sleep(step_s)
    return None
