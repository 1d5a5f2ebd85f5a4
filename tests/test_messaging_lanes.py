"""The publisher's per-topic lanes (zen.adapters.pubsub.TopicLane): every message handed over, inline or for
later, from many threads at once, is sent exactly once and settled with its own result."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from zen.adapters.pubsub import TopicLane
from zen.jobs.outgoing import OutgoingMessage
from zen.store.jobstore import PostgresJobStore


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

    lane = TopicLane(send)
    senders_before = {t for t in threading.enumerate() if t.name == "zen-publish"}  # other tests' lanes
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
    senders = {t for t in threading.enumerate() if t.name == "zen-publish"} - senders_before
    assert len(senders) <= 1  # one sender per lane


class _HeldPublisher:
    """Settles handed-over messages only when released (a slow Pub/Sub); ``publish`` waits inline."""

    def __init__(self):
        self.release = threading.Event()
        self.inline, self.handed = 0, 0

    def publish(self, messages):
        self.inline += 1
        return ["id"] * len(messages)

    def publish_soon(self, messages, done, *, linger_s=0.0):
        self.handed += 1
        threading.Thread(target=lambda: (self.release.wait(10), done(["id"] * len(messages)))).start()


def test_only_the_last_request_in_flight_waits_for_the_urgent_messages_handed_over(db):
    from datetime import datetime, timezone

    from zen.jobs.messaging import OutboxRelay

    from zen.jobs.outgoing import Enqueued

    publisher = _HeldPublisher()
    relay = OutboxRelay(PostgresJobStore(db), publisher, lambda: datetime.now(timezone.utc), urgent=frozenset({"start"}))
    start = [Enqueued(1, OutgoingMessage("start", b"job"))]
    left = []
    second_inside, first_left = threading.Event(), threading.Event()

    def first():
        with relay.request():
            second_inside.wait(5)
            relay.flush_quietly(start)  # another request is in flight: handed over, no wait
        left.append("first")
        first_left.set()

    def second():
        with relay.request():
            second_inside.set()
            first_left.wait(5)
        left.append("second")  # the last one out: leaves only once the start is settled

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    assert first_left.wait(5) and left == ["first"]
    time.sleep(0.2)
    assert left == ["first"], "the last request left before the start message was acknowledged"
    publisher.release.set()
    for t in threads:
        t.join(5)
    assert left == ["first", "second"] and publisher.handed == 1 and publisher.inline == 0

    with relay.request():  # alone in the instance: its own RPC, as before
        relay.flush_quietly(start)
    assert publisher.inline == 1


class _BrokenPublisher(_HeldPublisher):
    def publish_soon(self, messages, done, *, linger_s=0.0):
        raise RuntimeError("no sender thread")


def test_a_hand_over_that_fails_leaves_nothing_for_later_requests_to_wait_on(db):
    from datetime import datetime, timezone

    from tests.relay_support import another_request
    from zen.jobs.messaging import OutboxRelay
    from zen.jobs.outgoing import Enqueued

    relay = OutboxRelay(PostgresJobStore(db), _BrokenPublisher(), lambda: datetime.now(timezone.utc), urgent=frozenset({"start"}))
    relay.wait_limit_s = 5
    with another_request(relay), relay.request():
        relay.flush_quietly([Enqueued(1, OutgoingMessage("start", b"job"))])  # logged, left for the tick
    began = time.monotonic()
    with relay.request():
        pass
    assert time.monotonic() - began < 1, "a failed hand-over left a count that every last request waits on"


def test_a_lane_survives_a_send_and_a_callback_that_raise():
    calls = []

    def send(batch):
        calls.append(len(batch))
        if len(calls) == 1:
            raise ValueError("bad request")
        return ["id"] * len(batch)

    lane = TopicLane(send)
    results = []
    lane.submit([(OutgoingMessage("t", b"a"), lambda r: results.append(r))], inline=True)

    def boom(_):
        raise RuntimeError("callback")

    lane.submit([(OutgoingMessage("t", b"b"), boom)], inline=True)
    lane.submit([(OutgoingMessage("t", b"c"), lambda r: results.append(r))], inline=True)
    assert isinstance(results[0], ValueError) and results[1] == "id" and calls == [1, 1, 1]


def _recording_lane():
    rpcs: list[list[bytes]] = []

    def send(batch):
        rpcs.append([m.data for m in batch])
        return ["id"] * len(batch)

    return TopicLane(send), rpcs


def test_lingering_messages_from_many_callers_share_one_rpc():
    lane, rpcs = _recording_lane()
    settled = threading.Semaphore(0)
    for n in range(20):  # twenty submissions' events, handed over within the linger
        lane.submit([(OutgoingMessage("events", f"e{n}".encode()), lambda _: settled.release())],
                    inline=False, linger_s=1.0)
    for _ in range(20):
        assert settled.acquire(timeout=10)
    assert rpcs == [[f"e{n}".encode() for n in range(20)]]  # one RPC, in order; without a linger: up to 20


def test_messages_queued_behind_an_rpc_in_flight_still_linger_to_share_the_next():
    """What queues while an RPC is in flight is not sent the moment it ends: it waits until its
    earliest message is due, and messages handed over meanwhile go in the same RPC."""
    entered, release, rpcs = threading.Event(), threading.Event(), []

    def send(messages):
        rpcs.append([m.data for m in messages])
        if len(rpcs) == 1:
            entered.set()
            assert release.wait(10)
        return [str(n) for n in range(len(messages))]

    lane, settled = TopicLane(send), threading.Semaphore(0)

    def hand_over(data: bytes, linger_s: float) -> None:
        lane.submit([(OutgoingMessage("starts", data), lambda _: settled.release())], inline=False,
                    linger_s=linger_s)

    hand_over(b"a", 0.0)
    assert entered.wait(10)  # a's RPC is in flight
    hand_over(b"b", 2.0)
    hand_over(b"c", 2.0)
    release.set()
    time.sleep(0.1)  # well within b's linger
    assert rpcs == [[b"a"]], "what queued behind the RPC went out before it was due"
    hand_over(b"d", 2.0)
    for _ in range(4):
        assert settled.acquire(timeout=10)
    assert rpcs == [[b"a"], [b"b", b"c", b"d"]]


def test_a_message_due_now_is_not_held_by_a_lingering_one():
    lane, rpcs = _recording_lane()
    settled = threading.Event()
    lane.submit([(OutgoingMessage("t", b"later"), lambda _: None)], inline=False, linger_s=60.0)
    time.sleep(0.05)  # the sender is lingering
    assert rpcs == []
    lane.submit([(OutgoingMessage("t", b"now"), lambda _: settled.set())], inline=True)  # lane busy: queued
    assert settled.wait(10), "a message due now waited for the linger of one handed over before it"
    assert rpcs == [[b"later", b"now"]]


def test_a_batch_never_exceeds_one_publish_request_inline_or_handed_over():
    lane, rpcs = _recording_lane()
    lane.max_bytes = 2_500  # as 8 MB is to 64 KB messages
    big = [(OutgoingMessage("t", bytes([65 + n]) * 1_000), lambda _: None) for n in range(7)]
    lane.submit(big, inline=True)  # the tick's resend: its own thread
    assert [len(batch) for batch in rpcs] == [2, 2, 2, 1] and sum(rpcs, []) == [m.data for m, _ in big]
    rpcs.clear()
    settled = threading.Semaphore(0)
    lane.submit([(m, lambda _: settled.release()) for m, _ in big], inline=False)
    for _ in big:
        assert settled.acquire(timeout=10)
    assert [len(batch) for batch in rpcs] == [2, 2, 2, 1]


class _LingerRecorder(_HeldPublisher):
    def __init__(self):
        super().__init__()
        self.lingers = []

    def publish_soon(self, messages, done, *, linger_s=0.0):
        self.lingers.append(linger_s)
        done(["id"] * len(messages))


def test_events_linger_only_while_other_requests_keep_the_cpu(db):
    """Alone in its instance, a request's events must be on their way before it answers (the CPU is
    throttled after it); beside other requests in flight they may wait to share an RPC."""
    from datetime import datetime, timezone

    from zen.jobs.messaging import OutboxRelay

    from zen.jobs.outgoing import Enqueued

    publisher = _LingerRecorder()
    relay = OutboxRelay(PostgresJobStore(db), publisher, lambda: datetime.now(timezone.utc), urgent=frozenset({"start"}))
    event = [Enqueued(1, OutgoingMessage("events", b"queued"))]
    with relay.request():
        relay.flush_quietly(event)
    with relay.request(), relay.request():
        relay.flush_quietly(event)
    assert publisher.lingers == [0.0, relay.events_linger_s]


def test_starts_linger_only_while_other_requests_keep_the_cpu(db):
    """Alone, a request's start is published inline and acknowledged before it answers; beside other
    requests in flight it is handed over to share an RPC with theirs, for at most ``urgent_linger_s``
    (the last request out sends what lingers at once: test_outbox_relay)."""
    from datetime import datetime, timezone

    from zen.jobs.messaging import OutboxRelay

    from zen.jobs.outgoing import Enqueued

    publisher = _LingerRecorder()
    relay = OutboxRelay(PostgresJobStore(db), publisher, lambda: datetime.now(timezone.utc), urgent=frozenset({"start"}))
    start = [Enqueued(1, OutgoingMessage("start", b"job"))]
    with relay.request():
        relay.flush_quietly(start)
    assert (publisher.inline, publisher.lingers) == (1, [])
    with relay.request(), relay.request():
        relay.flush_quietly(start)
    assert (publisher.inline, publisher.lingers) == (1, [relay.urgent_linger_s])
    assert 0 < relay.urgent_linger_s <= 0.05  # a start waits milliseconds at most, never a boot's worth
