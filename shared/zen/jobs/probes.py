"""The heartbeat path's probe: whether the reports agents publish reach Zen promptly, which the lost-job sweep
relies on.

An agent's fence (``zen.agent.fence``) is renewed by every report of its attempt that Pub/Sub *accepted*; Zen
counts an attempt's silence from the last report it *handled*. The sweep may take an attempt for lost only while
what Pub/Sub accepted is handled within the fence's margin (``zen.core.lease.probe_late_s``): reports accepted
but held back (the heartbeat function at its instance limit, answering 429 or 5xx, out of database connections:
Pub/Sub's push then backs off) leave the agent's fence up while Zen hears nothing, and a second attempt would run
beside the first. So each scale tick publishes a probe on ``zen-heartbeats`` (a fresh nonce, its time kept in
``tick_clock``), and the heartbeat function notes when it hears it: what Pub/Sub accepted up to when that probe was
sent has come through, however late (``tick_clock.probe_vouched_at``). The sweep counts an attempt's silence up to
then, not to now (``zen.core.silence.decide_silence``'s ``heard_until``): a report accepted after it may still
wait in Pub/Sub, its agent's fence up. A stall that began after the last probe came through holds every silence
where it was until a probe sent after it comes through; a steadily slow path (a backlog of the heartbeat
function) only delays the verdict by its lag; a VM really gone is found once a probe sent one timeout after its
last report comes through (about a tick after the timeout while the path is prompt). A probe unheard two timeouts
after it was sent (lost, or the path slow or stalled) is replaced by the next tick's, and kept as the previous
one: it still vouches if it comes through. Either coming through while the one replaced is outstanding says the
path stalled two timeouts: its backlog comes back in no order (each message refused and retried in its own backoff,
the newest refused least and back soonest), so the probe came through ahead of reports accepted before it was
sent; silences then count afresh from when it was heard (``tick_clock.back_at``, as after a gap in the ticks): on
its word alone, the sweep took a running attempt for lost with its agent's fence up
(``tests/test_probe_ahead_of_its_backlog.py``). A path steadily up to two timeouts behind is followed; one further
behind holds silences.

The probe is a test of the path, not of each message: Pub/Sub does not order them, and a report that alone
fails and waits in its own backoff is not seen by it (the attempt's next reports, 30 s apart, are). Until a
probe has been heard once (a Zen whose probes never come through: the tick not allowed to publish on
``zen-heartbeats``, say) the sweep counts silences to now, as it did without it, and says so once a tick in a
warning. A probe the tick could not publish vouches for nothing (the path may have stalled since the last one
came through); while the tick cannot publish, silences are held for at most ``UNPUBLISHED_HOLD`` timeouts since
the last probe that came through, then counted to now with an error each tick (else a tick no longer allowed to
publish would hold a dead VM's job for ever; a stall of the path that long while the tick cannot publish is the
limit: a job may then run beside its rerun until its STOP reaches it).
Forged probes need the nonce, which only the tick and Pub/Sub see. Why: docs/reference/agent.md, "The fence".

What a probe does not see: a path that lets some pushes through while others wait, each in its own backoff (the
heartbeat function at its instance limit answering some with 429). A probe may come through at its first try while
every report of one attempt is held back. So the heartbeat function also notes the delivery lag of the reports that
do come through (``heard_late``: handled at, by the function's clock, minus the ``publish_time`` Pub/Sub stamped),
when over ``LATE_DELIVERY_S``, in ``tick_clock``; for a heartbeat timeout after, the sweep counts silences only up
to now minus that lag, and up to the latest probe heard (the stricter holds): a slow path delays the verdict by its
lag. A path on which no report at all comes through late is the probe's alone to judge
(``tests/test_heartbeat_lag_holds_silence.py``).
"""

from __future__ import annotations

import json
import logging
import secrets
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from zen.core.lease import probe_late_s
from zen.core.config import ZenConfig
from zen.jobs.outgoing import OutgoingMessage

if TYPE_CHECKING:
    from zen.jobs.messaging import OutboxRelay
    from zen.jobs.store import JobStore, JobTx

log = logging.getLogger("zen.jobs.service")
UNPUBLISHED_HOLD = 10  # heartbeat timeouts a path unvouched for holds silences while the tick cannot publish probes
LATE_DELIVERY_S = 15.0  # a report's delivery lag noted above this (heard_late): the healthy path writes nothing


def looked_at(tx: JobTx, config: ZenConfig, now: datetime) -> tuple[datetime | None, datetime, str | None]:
    """The tick's look at its last probe, in the sweep's transaction after ``record_tick``: when silences count
    from (``tick_clock.back_at``, the end of the last gap in the ticks) and to (now, until a probe has come
    through; then the time the latest heard was sent), and the nonce of the next probe to publish after commit
    (``send``), if one is due (the last one heard, or unheard two timeouts after it was sent)."""
    nonce, timeout_s = secrets.token_hex(16), config.deadlines.heartbeat_timeout_s
    look = tx.look_at_probe(now, probe_late_s(timeout_s), 2 * timeout_s, nonce)
    if look.late:
        log.warning("the heartbeat path is late: silences count only to the last probe that came through",
                    extra={"probe_sent_at": look.sent_at.isoformat() if look.sent_at else None,
                           "vouched_at": look.vouched_at.isoformat() if look.vouched_at else None})
    elif not look.seen and look.sent_at is not None and (now - look.sent_at).total_seconds() > probe_late_s(
            config.deadlines.heartbeat_timeout_s):
        log.warning("no probe of the heartbeat path has come through yet: silences count as if the path were prompt "
                    "(can the tick's account publish on zen-heartbeats?)")
    until = look.vouched_at if look.vouched_at is not None else now  # (0041 sets it wherever a probe was seen)
    if look.seen and look.sent_at is None and (now - until).total_seconds() > UNPUBLISHED_HOLD * timeout_s:
        log.error("probes of the heartbeat path could not be published and none has come through for "
                  f"{(now - until).total_seconds():.0f}s: silences count to now, as if the path were prompt "
                  "(can the tick's account publish on zen-heartbeats?)")
        until = now
    # Reports came through that late lately: others may still wait (heard_late). Seen after ``now`` too: a push
    # handled since this tick read its clock (before its transaction began), the hold as much its.
    if look.lag_s is not None and look.lag_at is not None and abs(now - look.lag_at) <= timedelta(seconds=timeout_s):
        until = min(until, now - timedelta(seconds=look.lag_s))
    return look.back_at, min(until, now), nonce if look.publish else None


def send(tx: JobTx, relay: OutboxRelay, config: ZenConfig, nonce: str | None) -> None:
    """Publish the probe ``nonce`` now, not through the outbox, in the sweep's transaction that keeps it as sent,
    before that commits. Published after the commit, a tick's instance killed in between (out of memory, a
    scale-in), or told nothing of a COMMIT Postgres applied (a Cloud SQL failover), kept a probe that was never
    published: the sweep held every silence for two timeouts, then read the next probe heard as a stalled path and
    counted every silence afresh, and a job whose VM had died was rerun minutes late
    (``tests/test_tick_killed_before_its_probe.py``, ``tests/test_tick_commit_lost_probe.py``). Published and the
    commit never made, no tick's probe has its nonce: heard, it is none (``heard``: "duplicate"); heard before the
    commit, its note waits for it (``probe_heard`` takes the lock ``record_tick`` took first in this transaction: the
    first tick's, which inserts the row, too). A probe that could not be published is marked unsent in the same
    transaction, so no tick takes its silence for a slow path (were the tick no longer allowed to publish on
    ``zen-heartbeats``, the sweep would hold for ever); the next tick sends one."""
    if nonce is None:
        return
    [result] = relay.publish_now([_probe(config, nonce)])
    if isinstance(result, Exception):
        log.warning("could not publish a probe of the heartbeat path: it vouches for nothing", extra={"error": str(result)})
        tx.probe_unsent(nonce)


def _probe(config: ZenConfig, nonce: str) -> OutgoingMessage:
    return OutgoingMessage(config.topics.heartbeats, json.dumps({"kind": "probe", "nonce": nonce}).encode(),
                           {"kind": "probe"})


def heard(store: JobStore, config: ZenConfig, nonce: str, now: datetime) -> str:
    """The heartbeat function heard a probe: noted when it is the tick's last ("applied"; else "duplicate": another,
    heard before or replaced); the path is vouched for up to when it was sent."""
    with store.transaction() as tx:
        lag_s = tx.probe_heard(nonce, now)
    if lag_s is not None and lag_s > probe_late_s(config.deadlines.heartbeat_timeout_s):
        log.warning("a probe of the heartbeat path came through late: silences count up to when it was sent",
                    extra={"lag_s": round(lag_s, 1)})
    return "duplicate" if lag_s is None else "applied"


def heard_late(store: JobStore, config: ZenConfig, published: datetime | None, now: datetime) -> None:
    """A report handled ``now`` (the heartbeat function's clock, when it got the push) that Pub/Sub accepted at
    ``published``: its lag kept when over ``LATE_DELIVERY_S`` and above the lag kept (or that one is half a timeout
    old), which ``looked_at`` holds silences by for a timeout. No statement for a report on time. Best effort: the
    report is already handled, so an error is logged, not raised (Pub/Sub would push it again)."""
    lag_s = (now - published).total_seconds() if published is not None else 0.0
    if lag_s <= LATE_DELIVERY_S:
        return
    try:
        with store.transaction() as tx:
            tx.heard_late(lag_s, now, config.deadlines.heartbeat_timeout_s / 2)
    except Exception as error:  # noqa: BLE001 (the lag is noted again by the next report that late)
        log.warning("could not note a late report of the heartbeat path", extra={"lag_s": round(lag_s, 1),
                                                                              "error": str(error)})
        return
    log.warning("a report came through late: silences count up to now less its lag", extra={"lag_s": round(lag_s, 1)})
