"""An in-memory publisher (``zen.jobs.messaging.Publisher``) that records what was sent and can fail the
next publish of a topic, as Pub/Sub would (a result that is an exception: the relay leaves the row for
the tick)."""

from __future__ import annotations

import threading
from typing import Callable, Sequence

from zen.jobs.outgoing import OutgoingMessage


class RecordingPublisher:
    def __init__(self) -> None:
        self.sent: list[OutgoingMessage] = []
        self._failures: list[tuple[str | None, Exception]] = []
        self._lock = threading.Lock()

    def fail_next(self, error: Exception, topic: str | None = None) -> None:
        """The next publish with a message on ``topic`` (any topic: None) fails those messages with ``error``."""
        with self._lock:
            self._failures.append((topic, error))

    def publish(self, messages: Sequence[OutgoingMessage]) -> list[str | Exception]:
        results: list[str | Exception] = []
        with self._lock:
            failure = next((f for f in self._failures if any(f[0] in (None, m.topic) for m in messages)), None)
            if failure is not None:
                self._failures.remove(failure)
            for message in messages:
                if failure is not None and failure[0] in (None, message.topic):
                    results.append(failure[1])
                    continue
                self.sent.append(message)
                results.append(str(len(self.sent)))
        return results

    def publish_soon(self, messages: Sequence[OutgoingMessage],
                     done: Callable[[list[str | Exception]], None], *, linger_s: float = 0.0) -> None:
        done(self.publish(messages))

    def on(self, topic: str) -> list[OutgoingMessage]:
        with self._lock:
            return [m for m in self.sent if m.topic == topic]
