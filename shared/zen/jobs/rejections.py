"""A message that can never succeed, *rejected* (``JobService.reject``): a structured log line with the reason, a row
in ``rejected_messages`` (once per message id; a VM's report refused again alike counts on its row:
``JobTx.record_rejection``), a ``job.rejected`` / ``job.message_ignored`` event on ``zen-job-events`` (for a new row),
and a normal return so Pub/Sub acks it.

Whose a rejection is (``attached``): the job id a message names is only its text, written by whoever published it.
A rejection is that job's (its row's ``job_id``, the event's ``job_id``: what ``zen jobs get``, ``zen logs -f`` and a
subscriber filtering on ``attributes.job_id`` read as the job's) only where its sender is shown to be the job's: a
proven VM's report, or a submission or stop whose sender is proven (or, with ``ZEN_AUTH=off``, believed) and owns the
job it names, may stop it, or names an id no job or array holds yet. Any other keeps the id it named in
``named_job_id`` alone, so nobody can make Zen say "rejected" of another user's job. docs/reference/messages.md.
"""

from __future__ import annotations

import logging

from zen import telemetry
from zen.core.clock import Clock
from zen.core.config import ZenConfig
from zen.core.events import PubSubEnvelope
from zen.core.models import Job
from zen.core.text import escape_unstorable
from zen.jobs.announce import Announcements, RejectionEvent
from zen.jobs.authorization import may_stop
from zen.jobs.messaging import OutboxRelay, enqueue
from zen.jobs.outgoing import Enqueued
from zen.jobs.store import JobStore, JobTx

log = logging.getLogger("zen.jobs.service")


def attached(config: ZenConfig, source: str, named: Job | None, sender: str | None, *, unproven: bool,
             proof_required: bool) -> bool:
    """Whether a rejection of a message naming the job ``named`` (None: an id no job or array holds; an array's: its
    first task) is that job's. ``sender``: the message's proven sender, or with ``ZEN_AUTH=off`` the user_id its
    request claims (None: not known); ``unproven``: its sender's proof is required and failed (a VM's report refused
    before its VM was proven is always unproven)."""
    topics = config.topics
    if unproven:
        return False
    if source == topics.heartbeats:
        return True  # a proven VM's report about a job (Zen's own agent: its refusal is the attempt's)
    if named is None:
        return True  # no job has the id: the sender's own refused message (`zen jobs get` of the id says it)
    if source == topics.job_stop:
        return not proof_required if sender is None else may_stop(config, sender, named) is None
    return sender is not None and sender.lower() == named.user_id.lower()


class Rejections:
    """Records, announces and logs rejections (see the module docstring)."""

    def __init__(self, store: JobStore, config: ZenConfig, announce: Announcements, relay: OutboxRelay, clock: Clock,
                 proof_required: bool):
        self._store, self._config, self._announce, self._relay, self._clock = store, config, announce, relay, clock
        self._proof_required = proof_required

    def record(self, envelope: PubSubEnvelope, source: str, reason: str, job_id: str | None,
               event_type: RejectionEvent, job: Job | None = None, key: str | None = None,
               principal: str | None = None, claimed: str | None = None,
               unproven: bool = False) -> tuple[str | None, str]:
        """Record, announce and log a message that can never succeed; (the job id it named, the reason). What the
        rejection quotes of the message is escaped first, so it always stores. A repeat of ``key`` counts on its row,
        unannounced. ``principal``: its proven sender; ``claimed``: the user_id it claims (believed with
        ``ZEN_AUTH=off``); ``unproven``: a VM's report refused before its VM was proven."""
        now = self._clock()
        reason = escape_unstorable(reason, 2000)
        job_id = escape_unstorable(job_id, 200) if job_id is not None else None
        unproven = unproven or (principal is None and self._proof_required and source != self._config.topics.heartbeats)
        ids: list[Enqueued] = []
        with self._store.transaction() as tx:
            own = job_id is None or attached(self._config, source, self._named(tx, job_id, job, source, unproven),
                                             principal or claimed, unproven=unproven,
                                             proof_required=self._proof_required)
            first_time = tx.record_rejection(
                source=source, message_id=envelope.message_id, job_id=job_id if own else None, reason=reason,
                payload=envelope.data, now=now, key=key, principal=principal,
                named_job_id=None if own else job_id,
            )
            if first_time:
                event = (self._announce.rejection(event_type, job_id, job, reason, now) if own
                         else self._announce.rejection(event_type, None, None, reason, now, named_job_id=job_id))
                ids = enqueue(tx, [event], now)
        telemetry.emit(log, telemetry.MESSAGE_REJECTED, "message rejected", logging.WARNING, reason=reason,
                       reason_class=telemetry.reason_class(reason), source=source,
                       message_id=envelope.message_id, job_id=job_id)
        self._relay.flush_quietly(ids)
        return job_id, reason

    def _named(self, tx: JobTx, job_id: str, job: Job | None, source: str, unproven: bool) -> Job | None:
        """The job ``job_id`` names (an array's first task), read only where whose it is decides (``attached``)."""
        if job is not None or unproven or source == self._config.topics.heartbeats:
            return job
        if (found := tx.get_job(job_id)) is not None:
            return found
        tasks = tx.array_tasks(job_id)
        return tasks[0] if tasks else None
