"""The outbox relay's duties beyond the lanes (tests/test_messaging_lanes.py): what the last request
out waits for, and what the tick resends and prunes (``zen.jobs.messaging.OutboxRelay``)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

from tests.relay_support import another_request
from zen.adapters.pubsub import TopicLane
from zen.jobs.messaging import OutboxRelay, enqueue
from zen.jobs.outgoing import Enqueued, OutgoingMessage
from zen.store.jobstore import PostgresJobStore, PostgresJobTx


class TopicDown:
    def __init__(self):
        self.sent = []

    def publish(self, messages):
        out = []
        for m in messages:
            if m.topic == "events":
                out.append(RuntimeError("NOT_FOUND: topic"))
            else:
                self.sent.append(m)
                out.append("id")
        return out

    def publish_soon(self, messages, done, *, linger_s=0.0):
        done(self.publish(messages))


def test_a_topic_that_keeps_failing_does_not_starve_the_resend_of_others(db):
    """1,000 old rows of a topic that fails (gone, or its publisher role) sit before a stop order whose
    first publish was lost: the rows tried least go first, so the stop goes out at the first tick."""
    now = datetime.now(timezone.utc)
    old = now - timedelta(minutes=5)
    with db.transaction() as s:
        enqueue(PostgresJobTx(s), [OutgoingMessage("events", b"e%d" % n) for n in range(1000)], old)
        enqueue(PostgresJobTx(s), [OutgoingMessage("control", b"stop vm-1")], old)  # its first publish was lost
    pub = TopicDown()
    relay = OutboxRelay(PostgresJobStore(db), pub, lambda: now, urgent=frozenset({"control"}))
    for _ in range(5):  # five ticks, two resends each
        relay.flush_pending()
        relay.flush_pending()
    with db.transaction() as s:
        left = s.sql("SELECT topic, count(*) AS n FROM outbox WHERE sent_at IS NULL GROUP BY topic ORDER BY topic")
    assert pub.sent, f"the control message was never resent: {left}"


class ManualPublisher:
    def __init__(self):
        self.pending = []  # (done, n)

    def publish(self, messages):
        return ["id"] * len(messages)

    def publish_soon(self, messages, done, *, linger_s=0.0):
        self.pending.append((done, len(messages)))


def _two_requests(relay, rows):
    """A request that hands rows over beside another, then is last out; (its thread, set when it left)."""
    left = threading.Event()

    def mine():
        with another_request(relay) as leave, relay.request():
            relay.flush_quietly(rows)  # not alone: handed over
            leave()  # the other leaves first: this one is last out
        left.set()

    m = threading.Thread(target=mine)
    m.start()
    return m, left


def test_a_late_callback_after_a_timed_out_wait_does_not_release_a_newer_one(db):
    """The last request out gave up on a slow publish (wait_limit_s); its late callback must not count
    for a newer hand-over, whose last request must still wait for it."""
    pub = ManualPublisher()
    relay = OutboxRelay(PostgresJobStore(db), pub, lambda: datetime.now(timezone.utc), urgent=frozenset({"start"}))
    relay.wait_limit_s = 0.3
    # 1. a slow publish: the last request out gives up after wait_limit_s and resets the count
    m1, left1 = _two_requests(relay, [Enqueued(1, OutgoingMessage("start", b"s1"))])
    assert left1.wait(5)
    m1.join()
    # 2. a new urgent hand-over S2; its last request must wait for it
    m2, left2 = _two_requests(relay, [Enqueued(2, OutgoingMessage("start", b"s2"))])
    time.sleep(0.1)
    assert not left2.is_set()  # waiting for S2, correctly
    # 3. S1's RPC finally settles (late, e.g. after the second 30 s attempt)
    done1, n1 = pub.pending[0]
    done1(["id"] * n1)
    time.sleep(0.1)
    assert not left2.is_set(), "the last request left although S2 was never settled (S1's late callback counted for it)"
    done2, n2 = pub.pending[1]
    done2(["id"] * n2)  # S2 settles: its last request leaves
    assert left2.wait(5)
    m2.join()


class LanePublisher:
    def __init__(self):
        self.sent_at = []
        self.lane = TopicLane(self._send)

    def _send(self, batch):
        self.sent_at.append(time.monotonic())
        return ["id"] * len(batch)

    def publish(self, messages):
        raise AssertionError("not used")

    def publish_soon(self, messages, done, *, linger_s=0.0):
        results = []
        def settle(r):
            results.append(r)
            if len(results) == len(messages):
                done(results)
        self.lane.submit([(m, settle) for m in messages], inline=False, linger_s=linger_s)


def test_lingering_events_are_sent_before_the_last_request_answers(db):
    """Events and starts handed over beside another request linger to share an RPC; once the last
    request leaves nobody will: they go at once, and it waits for them (the CPU is throttled after it)."""
    pub = LanePublisher()
    relay = OutboxRelay(PostgresJobStore(db), pub, lambda: datetime.now(timezone.utc), urgent=frozenset({"start"}))
    with relay.request():
        with relay.request():  # another request in flight: events linger
            relay.flush_quietly([Enqueued(1, OutgoingMessage("events", b"job.submitted")),
                                 Enqueued(2, OutgoingMessage("start", b"job"))])  # both linger
    last_left = time.monotonic()
    time.sleep(0.2)
    assert pub.sent_at, "never sent"
    assert pub.sent_at[-1] <= last_left, f"sent {1000*(pub.sent_at[-1]-last_left):.0f} ms after the last request answered"


class Ok:
    def publish(self, m): return ["id"] * len(m)
    def publish_soon(self, m, done, *, linger_s=0.0): done(["id"] * len(m))


def test_a_tick_prunes_every_old_sent_row_not_one_batch(db):
    """Above ~50 submissions a second, one batch of 5,000 a pass fell behind: the table grew forever."""
    now = datetime.now(timezone.utc)
    with db.transaction() as s:
        s.sql("INSERT INTO outbox (topic, data, created_at, sent_at) "
              "SELECT 't', '\\x00'::bytea, :old, :old FROM generate_series(1, 30000)", old=now - timedelta(days=2))
    relay = OutboxRelay(PostgresJobStore(db), Ok(), lambda: now)
    relay.prune_budget_s = 600.0  # batches until one comes back short, whatever this machine's speed (the
    # 5 s budget is a bound for a loaded database: on a loaded 2-core run one batch took it all, 20,000 left)
    relay.flush_pending(); relay.flush_pending()  # one scale tick
    with db.transaction() as s:
        left = s.sql("SELECT count(*) AS n FROM outbox")[0]["n"]
    assert left == 0, f"{left} rows sent 2 days ago still kept after a tick (prune: 2 x 5,000 per minute)"



class FirstWriteHeld(PostgresJobStore):
    """The real store, whose first unit of work (the sent marks' timer) waits for ``go`` before it begins."""

    def __init__(self, db):
        super().__init__(db)
        self.entered, self.go, self._first = threading.Event(), threading.Event(), True

    def transaction(self):
        if self._first:
            self._first = False
            self.entered.set()
            self.go.wait(10)
        return super().transaction()


def test_the_tick_waits_for_the_sent_marks_being_written_before_it_resends(db):
    """Rows published at once after their commit are marked sent a moment later, by a timer. A tick that ran while
    the timer held the marks, not yet written, read every such row as unsent and published it again (a test's tick
    right after a burst resent eleven messages; starts, counted, came out twice)."""
    now = datetime.now(timezone.utc)
    with db.transaction() as s:  # old enough for the tick: a minute past their commit
        rows = enqueue(PostgresJobTx(s), [OutgoingMessage("starts", b"s%d" % n) for n in range(3)],
                       now - timedelta(minutes=5))
    pub = Counting()
    store = FirstWriteHeld(db)
    relay = OutboxRelay(store, pub, lambda: now)
    relay.marks.add(rows, ["id"] * len(rows))  # published: the timer marks them a moment later
    assert store.entered.wait(5)
    tick = threading.Thread(target=relay.flush_pending)
    tick.start()
    time.sleep(0.5)  # the tick under way while the timer's write waits
    store.go.set()
    tick.join(10)
    assert pub.sent == 0, f"the tick published {pub.sent} messages again"
    with db.transaction() as s:
        assert s.sql("SELECT count(*) AS n FROM outbox WHERE sent_at IS NULL")[0]["n"] == 0


class Counting:
    def __init__(self):
        self.sent = 0

    def publish(self, messages):
        self.sent += len(messages)
        return ["id"] * len(messages)

    def publish_soon(self, messages, done, *, linger_s=0.0):
        done(self.publish(messages))
