"""One subscription's backlog: message copies, leases, redelivery and flow control (pure; times passed in
by the caller). :class:`StreamBudget` tracks what one StreamingPull connection has outstanding.

The delivery rules: docs/reference/simulator.md, "The Pub/Sub stand-in".
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from google.pubsub_v1 import types as T


@dataclass(eq=False)
class Entry:
    """A subscription's copy of one published message."""

    seq: int
    message: T.PubsubMessage
    size: int
    published: float
    key: str = ""  # ordering key, only when the subscription is ordered
    failures: int = 0  # nacks + expired deadlines so far
    lease_no: int = 0  # number of deliveries; the current ack id carries this number
    deadline: float | None = None  # set while leased
    available_at: float = 0.0
    stream: "StreamBudget | None" = None


@dataclass(eq=False)
class StreamBudget:
    """Flow control of one StreamingPull stream (``<= 0`` limits mean unlimited)."""

    max_messages: int
    max_bytes: int
    ack_deadline: int
    outstanding: dict[int, int] = field(default_factory=dict)  # seq -> size
    outstanding_bytes: int = 0

    def room(self) -> tuple[int, int | None] | None:
        """(messages, bytes) that may still be sent, or None when the stream is full."""
        count = self.max_messages - len(self.outstanding) if self.max_messages > 0 else 1000
        nbytes = self.max_bytes - self.outstanding_bytes if self.max_bytes > 0 else None
        if count <= 0 or (nbytes is not None and nbytes <= 0):
            return None
        return min(count, 1000), nbytes

    def add(self, entry: Entry) -> None:
        self.outstanding[entry.seq] = entry.size
        self.outstanding_bytes += entry.size

    def release(self, entry: Entry) -> None:
        size = self.outstanding.pop(entry.seq, None)
        if size is not None:
            self.outstanding_bytes -= size


class SubscriptionQueue:
    """Backlog and leases of one subscription."""

    def __init__(
        self,
        uid: str,
        *,
        ordered: bool,
        max_attempts: int | None,
        backoff: tuple[float, float] | None,
        retention: float,
    ) -> None:
        self.uid = uid
        self.ordered = ordered
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.retention = retention
        self._reset()

    def _reset(self) -> None:
        self.entries: dict[int, Entry] = {}
        # The heaps are lazy: items are checked against the entry when they surface.
        self._order: deque[int] = deque()  # publish order, for retention
        self._ready: list[int] = []  # seqs that may be delivered now
        self._delayed: list[tuple[float, int]] = []  # (available_at, seq) in backoff
        self._leases: list[tuple[float, int, int]] = []  # (deadline, seq, lease_no)
        self._keys: dict[str, deque[int]] = {}  # ordering key -> pending seqs, oldest first

    def __len__(self) -> int:
        return len(self.entries)

    def ack_id(self, entry: Entry) -> str:
        return f"{self.uid}-{entry.seq}-{entry.lease_no}"

    def delivery_attempt(self, entry: Entry) -> int:
        return entry.failures + 1 if self.max_attempts else 0

    def add(self, seq: int, message: T.PubsubMessage, size: int, published: float) -> None:
        key = message.ordering_key if self.ordered else ""
        entry = Entry(seq, message, size, published, key=key)
        self.entries[seq] = entry
        self._order.append(seq)
        if key:
            pending = self._keys.setdefault(key, deque())
            pending.append(seq)
            if len(pending) > 1:
                return  # waits for the earlier messages of its key
        heapq.heappush(self._ready, seq)

    # --- state changes ---------------------------------------------------------------------

    def _make_available(self, entry: Entry, at: float, now: float) -> None:
        entry.available_at = at
        if at > now:
            heapq.heappush(self._delayed, (at, entry.seq))
        else:
            heapq.heappush(self._ready, entry.seq)

    def _unlease(self, entry: Entry) -> None:
        entry.deadline = None
        if entry.stream is not None:
            entry.stream.release(entry)
            entry.stream = None

    def _remove(self, entry: Entry) -> None:
        self._unlease(entry)
        del self.entries[entry.seq]
        if entry.key:
            pending = self._keys[entry.key]
            if pending[0] == entry.seq:
                pending.popleft()
                if pending:  # the next message of the key may go now
                    heapq.heappush(self._ready, pending[0])
            else:
                pending.remove(entry.seq)
            if not pending:
                del self._keys[entry.key]

    def _fail(self, entry: Entry, now: float) -> Entry | None:
        self._unlease(entry)
        entry.failures += 1
        if self.max_attempts and entry.failures >= self.max_attempts:
            self._remove(entry)
            return entry
        delay = 0.0
        if self.backoff is not None:
            low, high = self.backoff
            delay = min(high, low * (2 ** (entry.failures - 1)))
        self._make_available(entry, now + delay, now)
        return None

    def _promote(self, now: float) -> None:
        while self._delayed and self._delayed[0][0] <= now:
            at, seq = heapq.heappop(self._delayed)
            entry = self.entries.get(seq)
            if entry is not None and entry.deadline is None and entry.available_at == at:
                heapq.heappush(self._ready, seq)

    def take(
        self,
        now: float,
        max_count: int,
        max_bytes: int | None,
        ack_deadline: float,
        stream: StreamBudget | None = None,
        response_bytes: int | None = None,
    ) -> list[Entry]:
        """Lease up to ``max_count`` available messages (and until ``max_bytes`` is reached), of at most
        ``response_bytes`` together (the first one whatever its size)."""
        self._promote(now)
        picked: list[Entry] = []
        used = 0
        while self._ready and len(picked) < max_count:
            if max_bytes is not None and used >= max_bytes:
                break
            entry = self.entries.get(self._ready[0])
            if entry is None or entry.deadline is not None or entry.available_at > now:
                heapq.heappop(self._ready)
                continue  # stale heap item
            if response_bytes is not None and picked and used + entry.size > response_bytes:
                break  # the next response takes it
            heapq.heappop(self._ready)
            entry.lease_no += 1
            entry.deadline = now + ack_deadline
            entry.stream = stream
            if stream is not None:
                stream.add(entry)
            heapq.heappush(self._leases, (entry.deadline, entry.seq, entry.lease_no))
            picked.append(entry)
            used += entry.size
        return picked

    def ack(self, seq: int, lease_no: int) -> bool:
        """Acknowledge the current lease. An ack after its deadline (or after a nack) is ignored and the
        message comes back: Pub/Sub only says such an ack "may succeed", and a subscriber must not count on it."""
        entry = self.entries.get(seq)
        if entry is None or entry.deadline is None or entry.lease_no != lease_no:
            return False
        self._remove(entry)
        return True

    def modify(
        self, seq: int, lease_no: int, seconds: int, now: float
    ) -> tuple[bool, Entry | None]:
        """Change the deadline of the current lease; 0 is a nack.

        Returns (changed, entry to dead-letter or None). Stale ack ids are ignored.
        """
        entry = self.entries.get(seq)
        if entry is None or entry.deadline is None or entry.lease_no != lease_no:
            return False, None
        if seconds > 0:
            entry.deadline = now + seconds
            heapq.heappush(self._leases, (entry.deadline, seq, lease_no))
            return True, None
        return True, self._fail(entry, now)

    def _live_lease(self, item: tuple[float, int, int]) -> Entry | None:
        deadline, seq, lease_no = item
        entry = self.entries.get(seq)
        if entry is None or entry.lease_no != lease_no or entry.deadline != deadline:
            return None
        return entry

    def expire_leases(self, now: float) -> tuple[int, list[Entry]]:
        """Fail every lease whose deadline passed: (how many, entries to dead-letter)."""
        expired, dead = 0, []
        while self._leases and self._leases[0][0] <= now:
            entry = self._live_lease(heapq.heappop(self._leases))
            if entry is None:
                continue
            expired += 1
            failed = self._fail(entry, entry.deadline)  # backoff counts from the deadline
            if failed is not None:
                dead.append(failed)
        return expired, dead

    def drop_old(self, now: float) -> int:
        """Drop messages older than the retention; returns how many."""
        dropped = 0
        while self._order:
            entry = self.entries.get(self._order[0])
            if entry is not None and entry.published + self.retention > now:
                break
            self._order.popleft()
            if entry is not None:
                self._remove(entry)
                dropped += 1
        return dropped

    def clear(self) -> None:
        for entry in self.entries.values():
            self._unlease(entry)
        self._reset()

    def next_event(self, now: float) -> float | None:
        """The earliest time at which a lease expires, a backoff ends or retention drops one."""
        while self._leases and self._live_lease(self._leases[0]) is None:
            heapq.heappop(self._leases)
        while self._order and self._order[0] not in self.entries:
            self._order.popleft()
        times = []
        if self._leases:
            times.append(self._leases[0][0])
        if self._delayed:
            times.append(self._delayed[0][0])
        if self._order:
            times.append(self.entries[self._order[0]].published + self.retention)
        return min(times) if times else None
