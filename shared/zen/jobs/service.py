"""The job service: submit, heartbeat, stop, the tick's sweeps (``zen.jobs.sweeps``) and the VM heartbeat
(``zen.jobs.vm_beats``). Each call decodes one Pub/Sub message (validated once, here at the edge), locks
the job row, asks ``zen.core.lifecycle`` what to do, and writes the change, its history and its outgoing
messages in one transaction; after commit the outbox rows are published.

A message that can never succeed is *rejected*: recorded, announced and acked, and the job it names told of it only
when its sender is shown to be that job's (``zen.jobs.rejections``). ``TransientError`` (database down) propagates so
Pub/Sub redelivers.
"""

from __future__ import annotations

import logging
from datetime import datetime
from dataclasses import dataclass
from typing import Any, Callable

from zen import telemetry
from zen.core import gang, gang_ends, incarnation, lifecycle, report_end
from zen.core.lifecycle import Decision
from zen.core.clock import Clock
from zen.core.clearance import data_uris
from zen.core.config import ZenConfig
from zen.core.errors import Rejected, TransientError
from zen.core.events import PubSubEnvelope, decode_payload, job_id_hint, parse_json
from zen.jobs import flex_end, probes
from zen.jobs.announce import Announcements, RejectionEvent
from zen.jobs.arrays import ArrayJobs, made_by
from zen.jobs.authorization import kept_stop, may_stop, may_submit, taken_id, user_actor
from zen.jobs.claims import refuse_claim
from zen.jobs.late_final import late_final
from zen.jobs.decisions import DecisionWriter
from zen.jobs.messaging import OutboxRelay, enqueue
from zen.jobs.outgoing import Enqueued
from zen.core.models import (AgentStatus, ControlAction, ControlMessage, Heartbeat, Job, JobRequest, JobStatus,
                             StopRequest, JOB_ID_PATTERN, illegal_step, request_fingerprint)
from zen.adapters.submitters import SubmitterChecker
from zen.adapters.vm_proof import ProofChecker
from zen.core.stops import users_reason
from zen.core.text import escape_unstorable
from zen.core.vm_heartbeat import NewerFields, PathProbe, VmHeartbeat, VmUp, check_seq, model_of
from zen.jobs.placement import choose, configured_cluster, held_gpus, job_pools, resolve_request
from zen.jobs.rejections import Rejections
from zen.jobs.queueing import Queueing
from zen.jobs.sweeps import Sweeps
from zen.jobs.vm_beats import VmBeats
from zen.jobs.store import JobStore, JobTx, repeat_key  # the interface only: the driver loads in the adapter

log = logging.getLogger("zen.jobs.service")

SUBMITTED = lifecycle.Change(JobStatus.PENDING, "submitted")
ADMITTED = lifecycle.Change(JobStatus.QUEUED, "admitted")


@dataclass(frozen=True)
class Outcome:
    """What a handler did, for logs and tests."""

    result: str  # "created", "duplicate", "applied", "ignored", "rejected"
    job_id: str | None = None
    reason: str | None = None
    cluster: str | None = None  # a created job's, or a VM heartbeat's whose VM became usable: a pass follows
    regions: tuple[str, ...] | None = None  # a created job's pools (its regions x models: the cheap coverage check)
    admitted: bool = True  # False: created PENDING (its queue's quota is full): no demand to scale for
    nodes: int = 1  # a created job's VMs (a gang's nodes, an array's tasks let go): > 1 always gets a pass


class JobService:
    """Its collaborators: ``decisions`` writes every change (``zen.jobs.decisions``), ``sweeps`` is the
    tick's work over jobs (``zen.jobs.sweeps``), ``vm_beats`` the VM heartbeat (``zen.jobs.vm_beats``)."""

    def __init__(self, store: JobStore, config: ZenConfig, relay: OutboxRelay, clock: Clock):
        self._store, self._config, self._relay, self._clock = store, config, relay, clock
        self._queues = Queueing(config) if config.queues else None  # no queues: all admitted at once
        self._topics = config.topics
        self._announce = Announcements(config)
        self._submits = store.submissions(relay.flush_quietly)  # group commit
        self._proof = ProofChecker.from_env(config.project, clock)  # ZEN_VM_PROOF (zen.adapters.vm_proof)
        self._auth = SubmitterChecker.from_env(config, clock)  # ZEN_AUTH (zen.adapters.submitters)
        self.decisions = DecisionWriter(store, config, self._announce, self._queues)
        self._arrays = ArrayJobs(store, config, clock, relay, self.decisions, self._announce,
                                 queues=self._queues is not None, proof_required=self._auth.required)
        self.sweeps = Sweeps(store, config, clock, relay, self.decisions, self._arrays, self._auth.required)
        self.vm_beats = VmBeats(store, config, clock, relay, self.decisions)
        self._newer = NewerFields()  # a newer agent's report is read without what this release does not know
        self._rejections = Rejections(store, config, self._announce, relay, clock, self._auth.required)

    # -- submit --------------------------------------------------------------------------------
    def submit(self, envelope: PubSubEnvelope) -> Outcome:
        source = self._topics.job_submitted
        sender: str | None = None  # the proven sender, once known (recorded with a refusal)
        claimed: str | None = None  # the user_id it claims (believed with ZEN_AUTH=off)
        named: str | None = None  # its job_id once known (the request's, else its message id): its refusal's
        try:
            sender = self._sender(envelope)
            request: JobRequest = decode_payload(envelope, JobRequest, self._config.limits.max_message_bytes)
            claimed = request.user_id
            job_id = request.job_id or envelope.message_id
            if not JOB_ID_PATTERN.match(job_id):
                raise Rejected(f"the request has no job_id and its message id {escape_unstorable(job_id, 200)!r} "
                               "is not a valid job_id: give a job_id")
            named = job_id
            if sender is not None and request.user_id.lower() != sender:
                raise Rejected(f"the request says user_id {escape_unstorable(request.user_id, 128)!r} but its "
                               f"zen_auth token proves {sender}: a job is submitted as its sender (`zen submit` "
                               "sets user_id to the identity it proves)")
        except Rejected as rejection:
            return self.reject(envelope, source, rejection.reason, named or job_id_hint(envelope.data), "job.rejected",
                               principal=sender, claimed=claimed)
        canonical = request.canonical(job_id)
        request_hash = request_fingerprint(canonical)
        held, resolved = None, None  # what it waits for (zen.core.dependencies)
        try:
            resolved = resolve_request(self._config, request, job_id)
            if refused := may_submit(self._config, sender or request.user_id, resolved.queue, request.priority,
                                     data_uris(canonical)):
                raise Rejected(refused)
            if request.after and (after := self.decisions.after_hold(request, job_id, sender or request.user_id)):
                refused, held = after
                if refused is not None:
                    raise Rejected(refused)
        except Rejected as rejection:  # unless Pub/Sub redelivers a job or array accepted before a change (its
            with self._store.transaction() as tx:  # configuration, or how what it waits for ended)
                existing = tx.get_job(job_id)
                again = existing.request_hash == request_hash if existing else request.array is not None and (
                    made_by(tx, canonical, job_id, request.array, resolved))  # each task's request as sent, as a job's
            if not again:
                return self.reject(envelope, source, rejection.reason, job_id, "job.rejected", principal=sender,
                                   claimed=claimed)
            log.info("duplicate submit ignored", extra={"job_id": job_id})
            return Outcome("duplicate", job_id)
        now = self._clock()
        stored, widened = resolved.stored(canonical)  # its data's tags (data_clearance), and why
        submitted = lifecycle.Change(JobStatus.PENDING, f"submitted; {widened}") if widened else SUBMITTED
        pending = Job(job_id=job_id, status=JobStatus.PENDING, attempt=1, max_attempts=resolved.max_attempts,
                      cluster=resolved.cluster, user_id=sender or request.user_id, priority=request.priority,
                      regions=resolved.regions, request=stored, request_hash=request_hash,
                      max_runtime_s=resolved.max_runtime_s, region=None, zone=None, vm=None, last_seq=0,
                      last_heartbeat_at=None, submitted_at=now, queued_at=None, started_at=None, finished_at=None,
                      exit_code=None, message=None, updated_at=now, queue=resolved.queue, hold=held,
                      gpus=held_gpus(configured_cluster(self._config, resolved.cluster), request),
                      nodes=request.nodes)
        actor, waiting = f"user:{sender or request.user_id}", False
        if request.array is not None:  # N tasks, created whole or refused whole (ArrayJobs.submit)
            refused, tasks = self._arrays.submit(request, resolved, pending, canonical, actor, now, submitted,
                                                 self._kept_stop)
            if refused is not None:
                return self.reject(envelope, source, refused, job_id, "job.rejected", principal=sender, claimed=claimed)
            admitted = [t for t in tasks if t.status is JobStatus.QUEUED]  # not those their queue left PENDING
            return Outcome("created", job_id, cluster=tasks[0].cluster, regions=job_pools(self._config, tasks[0]),
                           admitted=bool(admitted), nodes=sum(t.nodes for t in admitted)) if tasks else Outcome(
                "duplicate", job_id)
        if (self._queues is None and len(resolved.shapes) == 1 and pending.hold is None
                and self._submit_queued(pending, actor, now, submitted)):
            return self._created(pending)  # its messages went to the relay with its statement's
        # The general path: the job_id exists (a redelivery or a reuse), a stop for it came first,
        # admission has to decide, or one of several GPU shapes is to be chosen.
        names_array = False  # an array's id is a job's for no one (as a job's is no array's)
        with self._store.transaction() as tx:
            shape, chosen = choose(tx, self._config, resolved, now, request.provisioning, request.max_runtime_s)
            gpus = held_gpus(configured_cluster(self._config, shape.cluster), request)
            pending = pending.model_copy(update={"cluster": shape.cluster, "regions": shape.regions, "gpus": gpus})
            created = tx.insert_job(pending)
            if created:
                if chosen:
                    submitted = lifecycle.Change(JobStatus.PENDING, f"{submitted.reason}; {chosen}")
                history, events = self._announce.history(pending, pending, [submitted], actor=actor, now=now,
                                                         from_status=None)
                tx.add_job_events(history)
                telemetry.log_changes(log, pending, pending, [submitted], None)
                ids = enqueue(tx, events, now)
                stopped, kept = self._kept_stop(tx, pending, now)
                ids += kept
                if not stopped and pending.hold is not None:
                    waiting = True  # until what it waits for ends (zen.core.dependencies)
                elif not stopped and self._queues is None:
                    ids += self.decisions.apply(tx, pending, Decision(changes=[ADMITTED], publish_start=True),
                                       actor="admission", now=now)
                elif not stopped:
                    assert pending.queue is not None  # resolve_request names one when queues are configured
                    ids += self.decisions.admit(tx, pending.queue, pending.cluster, now)
                    waiting = (tx.get_job(job_id) or pending).status is JobStatus.PENDING
            else:
                existing = tx.get_job(job_id)
                names_array = existing is None and bool(tx.array_tasks(job_id))  # (even one made meanwhile:
                # its insert waited for the array's commit, jobs_one_namespace)
        if not created:
            if names_array:
                return self.reject(envelope, source, f"job_id {job_id} is an array's id (its tasks are {job_id}-0, "
                                   "...): give the job another id", job_id, "job.rejected", principal=sender,
                                   claimed=claimed)
            if existing is None:  # its insert met the row, in this same transaction
                raise TransientError(f"job {job_id} was neither inserted nor found")
            if existing.request_hash != request_hash:
                return self.reject(envelope, source, taken_id(job_id, existing.user_id, request.user_id),
                                    job_id, "job.rejected", principal=sender, claimed=claimed)
            log.info("duplicate submit ignored", extra={"job_id": job_id})
            return Outcome("duplicate", job_id)
        self._relay.flush_quietly(ids)
        return self._created(pending, admitted=not waiting)

    def _sender(self, envelope: PubSubEnvelope) -> str | None:
        """The e-mail the message's ``zen_auth`` token proves (``Rejected`` if it proves nothing); None
        with ``ZEN_AUTH=off``."""
        proven = self._auth.check(envelope.attributes, envelope.publish_time)
        return proven.email if proven is not None else None

    def _kept_stop(self, tx: JobTx, job: Job, now: datetime,
                   of_array: list[tuple[str, str | None]] | None = None) -> tuple[bool, list[Enqueued]]:
        """A stop kept because it came before ``job`` (or before its array: ``of_array``, taken once for
        every task), applied if its sender may stop it (else a history note says why not): (whether the job
        was stopped, its messages)."""
        chosen, refused = kept_stop(self._config, job, tx.take_early_stops(job.job_id) + list(of_array or ()),
                                    self._auth.required)
        for who, why in refused:
            self.decisions.note(tx, job, f"a stop sent before the job came is not applied: {why}", actor=who, now=now)
        if chosen is None:
            return False, []
        reason, actor = users_reason(chosen[0]), user_actor(chosen[1])  # kept on the row as a user's stop's (decide_stop)
        return True, self.decisions.apply(tx, job, Decision(
            changes=[lifecycle.Change(JobStatus.CANCELLED, f"stopped before it arrived: {reason}")],
            fields={"finished_at": now, "hold": None, "hold_until": None, "stop_reason": reason}), actor=actor, now=now,
            admit=of_array is None)  # an array's tasks: admitted once, after all its stops (ArrayJobs._admit)

    def _submit_queued(self, pending: Job, actor: str, now: datetime,
                       submitted: lifecycle.Change = SUBMITTED) -> bool:
        """The common submission: the job QUEUED, 2 history rows, 3 messages in one statement shared with
        concurrent ones, which publishes them (group commit: ``JobStore.submissions``); False if its job_id
        exists or a stop came first."""
        route = self.decisions.route(pending, now)
        queued = pending.model_copy(update={"status": JobStatus.QUEUED, "queued_at": now,
                                            "start_published_at": now, **route.fields()})
        first, first_events = self._announce.history(pending, pending, [submitted], actor=actor, now=now,
                                                     from_status=None)
        admitted = lifecycle.Change(JobStatus.QUEUED, f"admitted; {route.note}") if route.note else ADMITTED
        second, second_events = self._announce.history(pending, queued, [admitted], actor="admission", now=now,
                                                       from_status=JobStatus.PENDING)
        messages = first_events + second_events + self._announce.start(queued)
        if not self._submits.write(queued, first + second, messages, now):
            return False
        telemetry.log_changes(log, pending, queued, [submitted, admitted], None)
        return True

    def _created(self, job: Job, admitted: bool = True) -> Outcome:
        log.info("job submitted", extra={"job_id": job.job_id, "cluster": job.cluster, "admitted": admitted})
        return Outcome("created", job.job_id, cluster=job.cluster, regions=job_pools(self._config, job), admitted=admitted,
                       nodes=job.nodes)

    # -- heartbeat -----------------------------------------------------------------------------
    def heartbeat(self, envelope: PubSubEnvelope) -> Outcome:
        source = self._topics.heartbeats
        try:
            if len(envelope.data) > self._config.limits.max_message_bytes:
                data = None  # _decode rejects it on size before parsing
            else:
                data = parse_json(envelope.data)
            data, newer = self._newer.known(data, model := model_of(data))  # a newer agent's: zen.core.vm_heartbeat
            if newer:
                log.warning("fields this Zen does not know ignored", extra={"model": model.__name__, "fields": list(newer)})
            message = decode_payload(envelope, model, self._config.limits.max_message_bytes, data)
            if isinstance(message, PathProbe):  # the tick's, of this path (zen.jobs.probes): no VM's, no token
                self._proof.ready()  # held back while reports would be: their certificates unreachable
                return Outcome(probes.heard(self._store, self._config, message.nonce, self._clock()), None)
            if isinstance(message, VmUp):  # a first word: no seq, and a token bound to no key
                self._proof.check_up(envelope.attributes, message.vm, message.zone, self._config.project,
                                     envelope.publish_time, message.region)
                return self._vm_up(envelope, message)
            check_seq(message.seq, self._clock())
            proven = self._proof.check(envelope.attributes, message.vm, message.zone, self._config.project,
                                       envelope.publish_time, message.region, data=envelope.data)
        except Rejected as rejection:
            return self.reject(envelope, source, rejection.reason, job_id_hint(envelope.data), "job.message_ignored",
                               unproven=True)  # no VM shown to have sent it: no job's
        created = None if proven is None else proven.created_at  # a VM its MIG recreated: zen.core.incarnation
        if isinstance(message, VmHeartbeat):
            return self._vm_heartbeat(envelope, message, created)
        if message.status is AgentStatus.RUNNING:
            with self._store.session() as tx:  # one statement, its own commit
                if tx.record_progress(job_id=message.job_id, attempt=message.attempt, vm=message.vm,
                                      seq=message.seq, message=message.message, now=self._clock(),
                                      vm_since=incarnation.made_since(created)):
                    return Outcome("applied", message.job_id)
        elif message.status is AgentStatus.CLAIMED:  # a stop that crossed the submission is applied first
            self.sweeps.before_claim(message.job_id)
        offered: list[Enqueued] = []  # a job of higher priority offered to the VM instead (claims.outranked)
        outcome = self._on_job(envelope, source, message.job_id, f"vm:{message.vm}", flex_end.told(  # (its run's end)
                               self._config, message, flex_end.run_marks(self._store, message),
                               lambda job, now: report_end.decide(job, message, now, envelope.publish_time,
                                                                  self._config.gangs, created)),
                               answering=message, seal=lambda: self._proof.seal(proven, message.vm, self._config.project),
                               guard=lambda tx, job: incarnation.not_its_vm(job, message, created) or (
                                   gang.keep_deadline(job, refuse_claim(
                                   tx, self._config, job, message, self._clock(), self._proof.names_proven,
                                   envelope.publish_time, lambda other, offer: offered.extend(self.decisions.apply(
                                       tx, other, offer, actor="priority", now=self._clock())), created))
                                                      or (None if gang_ends.is_gang(job)  # one node's word is not the gang's
                                                          else late_final(tx, job, message, self._clock(), created))))
        self._relay.flush_quietly(offered)  # after the claim's RELEASE: the VM takes an offer once free of its claim
        return outcome

    def _vm_up(self, envelope: PubSubEnvelope, up: VmUp) -> Outcome:
        """A VM's first word (``VmUp``): nothing is recorded; its cluster is named so that
        ``Zen.on_heartbeat`` runs a pass while that cluster's boots race."""
        refusal = self.vm_beats.refusal(up, self._proof.names_proven)
        if refusal is not None:
            return self.reject(envelope, self._topics.heartbeats, refusal, None, "job.message_ignored")
        return Outcome("applied", None, cluster=up.cluster)

    def _vm_heartbeat(self, envelope: PubSubEnvelope, hb: VmHeartbeat, created: datetime | None = None) -> Outcome:
        refusal = self.vm_beats.refusal(hb, self._proof.names_proven)  # a cluster, region or MIG not the VM's
        if refusal is not None:
            return self.reject(envelope, self._topics.heartbeats, refusal, None, "job.message_ignored")
        changed, usable = self.vm_beats.record_vm(hb, created)
        return Outcome("applied" if changed else "duplicate", hb.job_id, cluster=hb.cluster if usable else None)

    # -- stop ----------------------------------------------------------------------------------
    def stop(self, envelope: PubSubEnvelope) -> Outcome:
        source = self._topics.job_stop
        sender: str | None = None
        try:
            sender = self._sender(envelope)
            request: StopRequest = decode_payload(envelope, StopRequest, self._config.limits.max_message_bytes)
        except Rejected as rejection:
            return self.reject(envelope, source, rejection.reason, job_id_hint(envelope.data), "job.message_ignored",
                               principal=sender)
        if (array := self._arrays.stop(request, sender)) is not None:  # it names an array (ArrayJobs.stop)
            count, refused = array
            if refused is not None and not count:
                return self.reject(envelope, source, refused, request.job_id, "job.message_ignored", principal=sender)
            return Outcome("applied", request.job_id, reason=f"{count} task(s) of array {request.job_id} stopped")
        kept = []

        def keep(tx: JobTx, now: datetime) -> str:  # Pub/Sub does not order across topics: the submit may come later
            kept.append(request.job_id)
            tx.remember_early_stop(request.job_id, request.reason or "stop requested", now, sender)
            return "the stop is kept and applies if the job is submitted later" + (
                f" and {sender} may stop it" if sender else "")

        def decide(job: Job, now: datetime) -> Decision:
            if sender is not None and (refused := may_stop(self._config, sender, job)):
                return Decision(ignored=refused)
            return gang.decide_stop(job, request, now)

        outcome = self._on_job(envelope, source, request.job_id, user_actor(sender), decide,
                               on_unknown=keep, principal=sender)
        if kept:  # the submission may have committed meanwhile without seeing the kept stop
            self.sweeps.apply_early_stops(kept)
        return outcome

    # -- shared machinery ----------------------------------------------------------------------
    def _on_job(self, envelope: PubSubEnvelope, source: str, job_id: str, actor: str,
                decide: Callable[[Job, Any], Decision],
                on_unknown: Callable[[JobTx, datetime], str] | None = None,
                guard: Callable[[JobTx, Job], Decision | None] | None = None,
                answering: Heartbeat | None = None, seal: Callable[[], str | None] | None = None,
                principal: str | None = None) -> Outcome:
        now = self._clock()
        note = None
        with self._store.transaction() as tx:
            job = tx.get_job(job_id, lock=True)
            if job is None:
                decision = None
                note = on_unknown(tx, now) if on_unknown else None
            else:
                decision = (guard(tx, job) if guard else None) or decide(job, now)
                if forbidden := self._forbidden(job, decision):
                    decision = Decision(ignored=forbidden)
                ids = self.decisions.apply(tx, job, decision, actor=actor, now=now, answering=answering, seal=seal)

        def key(cause: str) -> str | None:  # a VM's refused report about one attempt: one row (zen.store.rejections)
            return repeat_key(answering.vm, job_id, answering.attempt, cause[:200]) if answering is not None else None

        if job is None or decision is None:  # (no decision without a job)
            reason = f"unknown job {job_id}" + (f"; {note}" if note else "")
            return self.reject(envelope, source, reason, job_id, "job.message_ignored", key=key(reason),
                               principal=principal)
        self._relay.flush_quietly(ids)
        if decision.ignored:
            return self.reject(envelope, source, decision.ignored, job_id, "job.message_ignored", job=job,
                               key=key(decision.refused or decision.ignored), principal=principal)
        if decision.duplicate and not decision.changes_job:
            log.debug("duplicate or late message", extra={"job_id": job_id, "source": source})
            return Outcome("duplicate", job_id)
        return Outcome("applied", job_id)

    @staticmethod
    def _forbidden(job: Job, decision: Decision) -> str | None:
        bad = illegal_step(job.status, [c.to for c in decision.changes])
        return f"transition {bad[0].value} -> {bad[1].value} is not allowed" if bad else None

    def reject(self, envelope: PubSubEnvelope, source: str, reason: str, job_id: str | None,
               event_type: RejectionEvent, job: Job | None = None, key: str | None = None,
               principal: str | None = None, claimed: str | None = None, unproven: bool = False) -> Outcome:
        """Record, announce and log a message that can never succeed; it is then acked (``zen.jobs.rejections``)."""
        return Outcome("rejected", *self._rejections.record(
            envelope, source, reason, job_id, event_type, job=job, key=key, principal=principal, claimed=claimed,
            unproven=unproven))
