"""A transfer's progress (``zen.agent.staging``: inputs staged, outputs uploaded; a checkpoint's saves and restores):
files and bytes so far, its time, and a Cloud Storage outage it waits out, as its heartbeats and final report say."""

from __future__ import annotations

import time
from dataclasses import dataclass

from zen.core.text import human_bytes


@dataclass
class Progress:
    files: int = 0
    bytes: int = 0  # downloaded (or uploaded)
    started: float | None = None
    ended: float | None = None
    cached_bytes: int = 0  # staged from the agent's cache instead (zen.agent.cache)
    unavailable: tuple[float, str] | None = None  # (since, why): the Cloud Storage outage an upload waits out

    def seconds(self) -> float:
        return 0.0 if self.started is None else round((self.ended or time.monotonic()) - self.started, 3)

    def restart(self) -> None:
        """Counted afresh from now, in place: whoever reports this progress (a transfer's heartbeats) sees the new one."""
        self.files, self.bytes, self.started, self.ended = 0, 0, time.monotonic(), None
        self.cached_bytes, self.unavailable = 0, None

    def describe(self) -> str:
        cached = f" (and {human_bytes(self.cached_bytes)} from the cache)" if self.cached_bytes else ""
        down = "" if self.unavailable is None else \
            f", Cloud Storage unavailable for {time.monotonic() - self.unavailable[0]:.0f} s ({self.unavailable[1]})"
        return (f"{self.files} file{'s' if self.files != 1 else ''}, {human_bytes(self.bytes)}{cached} "
                f"in {self.seconds():g} s{down}")
