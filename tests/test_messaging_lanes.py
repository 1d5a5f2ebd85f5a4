"""The publisher's per-topic lanes (zen.messaging._Lane): every message handed over, inline or for
later, from many threads at once, is sent exactly once and settled with its own result."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from zen.messaging import OutgoingMessage, _Lane


def test_concurrent_inline_and_handed_over_messages_are_each_sent_once_and_settled():
    sent: list[bytes] = []
    rpcs: list[int] = []
    lock = threading.Lock()

    def send(batch):
        time.sleep(0.001)  # an RPC in flight lets others queue behind it
        with lock:
            sent.extend(m.data for m in batch)
            rpcs.append(len(batch))
        return [m.data.decode() for m in batch]

    lane = _Lane(send)
    results: dict[str, str] = {}
    settled = threading.Semaphore(0)

    def hand(n: int) -> None:
        key = f"m{n}"

        def settle(result, key=key):
            results[key] = result
            settled.release()

        lane.submit([(OutgoingMessage("t", key.encode()), settle)], inline=n % 2 == 0)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(hand, range(2000)))
    for _ in range(2000):
        assert settled.acquire(timeout=10)
    assert sorted(sent) == sorted(f"m{n}".encode() for n in range(2000))  # each once
    assert all(results[key] == key for key in results) and len(results) == 2000
    assert len(rpcs) < 2000  # messages that arrived during an RPC shared the next one
    assert sum(t.name == "zen-publish" for t in threading.enumerate()) <= 1  # one sender per lane
