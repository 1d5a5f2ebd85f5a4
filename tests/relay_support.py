"""A second request in flight beside the one a relay test makes (``zen.jobs.messaging.OutboxRelay.request``):
while it is inside, the test's request is not alone, so its urgent messages are handed over rather
than waited for; ``leave()`` ends it, so the test's request becomes the last one out."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def another_request(relay) -> Iterator[Callable[[], None]]:
    inside, go = threading.Event(), threading.Event()

    def other() -> None:
        with relay.request():
            inside.set()
            go.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(5)

    def leave() -> None:
        go.set()
        thread.join(5)

    try:
        yield leave
    finally:
        leave()
