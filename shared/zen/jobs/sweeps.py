"""The scale tick's work over jobs (``JobService.sweeps``): the lost-job sweep, the
republish of unclaimed start messages, the widening of starts narrowed near their data
(``zen.core.routing``), stops that raced their job's submission, and, without queues, the admission of
jobs left PENDING by removed queues. Each finds its candidates with one indexed query, then re-reads
each job under lock, decides and applies it on its own, so one bad job never blocks the others."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable

from zen.core import dependencies, gang, lifecycle, silence
from zen.core.clock import Clock
from zen.core.config import ZenConfig
from zen.core.errors import TransientError
from zen.core.lifecycle import Decision
from zen.jobs.authorization import EARLY_STOP_KEPT, kept_stop, user_actor
from zen.core.models import Job, JobStatus, StopRequest
from zen.core.provisioning import accepted_models, blocked_for, pool_key, region_of
from zen.core.routing import next_route
from zen.jobs.announce import is_start
from zen.jobs.decisions import DecisionWriter
from zen.jobs import claims, cloud_silence, flex_end, probes, stranding
from zen.jobs.placement import regions_cleared_now
from zen.jobs.messaging import OutboxRelay
from zen.jobs.outgoing import Enqueued

if TYPE_CHECKING:
    from zen.jobs.arrays import ArrayJobs
    from zen.jobs.store import JobStore, JobTx

log = logging.getLogger("zen.jobs.service")
# cluster -> pool -> (the planner's room for a gang there, when its pass read the fleet): JobTx.gang_rooms
Rooms = dict[str, dict[str, tuple[int, datetime | None]]]


class Sweeps:
    def __init__(self, store: JobStore, config: ZenConfig, clock: Clock, relay: OutboxRelay, decisions: DecisionWriter,
                 arrays: ArrayJobs, proof_required: bool):
        self._store = store
        self._proof_required = proof_required  # ZEN_AUTH=required: a kept stop applies only with its sender
        self._config = config
        self._clock = clock
        self._relay = relay
        self._decisions = decisions
        self._arrays = arrays

    def sweep_lost(self, limit: int = 500) -> int:
        """Jobs whose VM went silent past the deadline: LOST -> requeued (or FAILED). Returns changes.

        Silence is counted from when Zen could hear again: while Postgres (or the way to it) was down,
        heartbeats were refused and wait in Pub/Sub's backoff, and the ticks failed too. The first
        tick after a gap in the ticks (``JobTx.record_tick``) starts every held job's deadline
        afresh, so an outage longer than the heartbeat timeout does not stop and rerun every healthy
        job; a VM that is really gone is found one timeout after Zen is back (so too once a probe comes through
        after the heartbeat path stalled two timeouts: ``zen.jobs.probes``). Silence counts up to how far the
        heartbeat path is vouched for (``zen.jobs.probes``: reports Pub/Sub accepted after the last probe that
        came through, which keep their agent's fence up, may wait undelivered); each tick publishes the next. An attempt
        whose VM a scaling pass saw the cloud take is counted as a preemption (``zen.jobs.cloud_silence``)."""
        deadlines = self._config.deadlines
        now = self._clock()
        with self._store.transaction() as tx:
            tx.record_tick(now, deadlines.heartbeat_timeout_s / 2)
            back_at, until, probe = probes.looked_at(tx, self._config, now)
            # Each kind of held job past its own deadline: read past the shortest, STOPPING jobs waiting out a longer
            # stop_timeout_s (a stopped array's 500 tasks) filled the window, and a job gone silent was never reached.
            candidates = tx.held_jobs_silent_since(
                until - timedelta(seconds=deadlines.heartbeat_timeout_s), limit,
                until - timedelta(seconds=deadlines.stop_timeout_s),
                until - timedelta(seconds=deadlines.preempted_stop_s),
                deadlines.heartbeat_timeout_s) if back_at is None or back_at < until else []
            probes.send(tx, self._relay, self._config, probe)  # before the commit that keeps it as sent
        return self._for_each_job(candidates, "sweep", lambda tx, job: cloud_silence.taken(  # (its VM taken: free)
            self._config, tx, job, lambda seen: flex_end.of_nodes(seen, silence.decide_silence(
                seen, now, deadlines, back_at, until)), now))  # (flex_end: a gang's node whose run ended named so)

    def republish_unclaimed(self, limit: int = 500) -> int:
        """QUEUED jobs nobody claimed for ``start_republish_s``: publish their start message again, so
        a start message that was lost, expired or dropped can never strand a job. Returns how many."""
        now = self._clock()
        cutoff = now - timedelta(seconds=self._config.deadlines.start_republish_s)
        with self._store.transaction() as tx:
            candidates = tx.queued_jobs_published_before(cutoff, limit)
            tx.forget_early_stops(now - EARLY_STOP_KEPT)

        def decide(_: JobTx, job: Job) -> Decision | None:
            published = job.start_published_at or job.queued_at  # a QUEUED job has been queued
            stale = job.status is JobStatus.QUEUED and published is not None and published < cutoff
            return Decision(publish_start=True) if stale else None

        return self._for_each_job(candidates, "republish", decide)

    def widen_narrowed(self, limit: int = 500) -> int:
        """QUEUED jobs whose start went first to their data's regions and that nobody claimed within
        ``data_wait_s``: publish their start to every allowed region (``zen.core.routing``). Also a start held
        back after a repeated refused claim (``zen.jobs.claims``: ``widen_at`` set to then): published again,
        widened if it was narrowed. Returns how many."""
        now = self._clock()
        rooms: Rooms = {}  # cluster -> the planner's gang rooms, read once per sweep
        with self._store.transaction() as tx:
            candidates = tx.queued_jobs_to_widen(now, limit)
            gangs = self._gangs_stocked_out(tx, now, limit, rooms)
            candidates += [job_id for job_id in gangs if job_id not in candidates]

        def decide(tx: JobTx, job: Job) -> Decision | None:
            if job.status is not JobStatus.QUEUED or job.widen_at is None:
                return None
            if job.gang:  # a gang assembling: its deadline, or a stockout where it assembles (zen.core.gang)
                recent = now - timedelta(seconds=self._config.gangs.assemble_s)
                return gang.assembly_expired(job, now, self._config.gangs, self._blocked_for(tx, job, now),
                                             self._blocked_for(tx, job, now, since=recent),
                                             self._gang_room(job, job.gang[0].region, rooms))
            if job.widen_at > now:
                return None
            if not job.start_regions and not job.start_vms:  # it reaches every allowed region already
                return Decision(fields={"widen_at": None}, publish_start=True,
                                note="start published again: held back after its claim was refused again")
            route = next_route(self._config, job, now)
            return Decision(fields=route.fields(), publish_start=True, note=route.note)

        return self._for_each_job(candidates, "routing", decide)

    def narrow_uncleared(self, limit: int = 500) -> int:
        """QUEUED jobs allowed a region that no longer carries a tag they require (the configuration changed while
        they waited): narrowed to the regions that carry them now, or, with none, held PENDING until one does
        (``claims.recleared``). Run before the scaling pass: a VM asked for such a job where it cannot run was
        billed until its first claim was refused. Jobs whose request named no regions, short of a region added to
        their cluster since (with their tags), are widened to it: they waited for the regions they were queued with
        (stocked out, say), no VM was asked for them there, nor let claim them. Jobs asking more GPUs of a VM than
        their cluster's VMs have now (its ``gpu_count`` lowered while they waited: ``gpus_short``) are held, no VM asked
        for them: one booted for such a job was billed until its first claim was refused. So are jobs nothing configured
        can run for another change (``stranding.queued_candidates``: their cluster, model or regions gone, a gang above
        its cluster's lowered ``max_vms``): left QUEUED, they showed no hold and kept the oldest queued job's alert
        firing. Returns how many changed."""
        candidates: list[str] = []
        with self._store.transaction() as tx:
            for cluster in self._config.clusters:
                carried = {region: cluster.tags_of(region) for region in cluster.regions}
                candidates += tx.queued_jobs_uncleared(cluster.name, carried, limit)
                candidates += [j for j in tx.queued_jobs_short(cluster.name, carried, limit) if j not in candidates]
                candidates += [j for j in tx.queued_jobs_gpus_above(cluster.name, cluster.gpu_count, limit)
                               if j not in candidates]
            candidates += [j for j in stranding.queued_candidates(tx, self._config, limit) if j not in candidates]
        now = self._clock()
        return self._for_each_job(candidates, "placement", lambda _, job: claims.recleared(self._config, job, now))

    def _gangs_stocked_out(self, tx: JobTx, now: datetime, limit: int, rooms: Rooms) -> list[str]:
        """Gangs assembling in a region a stockout blocks now, or with a pool short of room for a gang
        (the planner's memory: ``RegionMemory.gang_room`` below ``max_vms_per_region``), per cluster."""
        found: list[str] = []
        for cluster in self._config.clusters:
            rooms[cluster.name] = tx.gang_rooms(cluster.name)
            short = {key for key, (room, _) in rooms[cluster.name].items() if room < cluster.max_vms_per_region}
            if keys := tx.blocked_regions(cluster.name, now) | short:
                found += tx.gangs_assembling_in(cluster.name, sorted({region_of(key) for key in keys}), limit)
        return found

    def _pools(self, job: Job, region: str) -> list[str]:
        """The pools of ``region`` the job may use (none: its cluster is no longer configured)."""
        cluster = self._config.cluster(job.cluster)
        if cluster is None:
            return []
        models = accepted_models(job.request.get("provisioning"), cluster.provisioning)
        return [pool_key(region, m, cluster.provisioning[0]) for m in models]

    def _gang_room(self, job: Job, region: str, rooms: Rooms) -> int | None:
        """The VMs the rest of a gang assembling in ``region`` could still get there (the most of any pool of it
        the job may use) at the planner's last pass (``rooms``: per cluster, as this sweep read them); None:
        unknown, or measured before the gang's last claim or leave (``gang.room_seen_after``)."""
        pools, known, nodes = self._pools(job, region), rooms.get(job.cluster, {}), job.gang or []
        if not pools or not nodes or not all(p in known and gang.room_seen_after(nodes, known[p][1]) for p in pools):
            return None
        return max(known[p][0] for p in pools)

    def _blocked_for(self, tx: JobTx, job: Job, now: datetime, since: datetime | None = None) -> frozenset[str]:
        """The job's regions where a stockout blocks every pool the job may use (the planner's memory), or
        (``since``) was found there after then with no VM booted since."""
        cluster = self._config.cluster(job.cluster)
        return frozenset() if cluster is None else blocked_for(
            job.regions, job.request.get("provisioning"), cluster.provisioning, tx.blocked_regions(job.cluster, now, since),
            job.request.get("max_runtime_s"), cluster.flex_start_run_s)

    def apply_early_stops(self, job_ids: list[str] | None = None, limit: int = 500) -> int:
        """Stops kept because their job was unknown when they came, whose job exists now, applied as
        the user's stop. A submission honours a kept stop it sees; one that raced it (the stop's
        transaction and the submission's statement each missed the other's uncommitted row) is
        caught here: right after the stop is kept (``job_ids``: its job), and at every tick (any job).
        Returns how many were applied."""
        if job_ids is None:
            with self._store.transaction() as tx:
                job_ids = tx.early_stops_of_submitted_jobs(limit)
        now = self._clock()
        applied = 0
        for name in job_ids:  # a stop kept for an array: all its tasks, in one transaction
            applied += self._arrays.apply_kept_stops(name)
        senders: dict[str, str] = {}  # job id -> the history's actor: the stop's proven sender

        def decide(tx: JobTx, job: Job) -> Decision | None:
            chosen, refused = kept_stop(self._config, job, tx.take_early_stops(job.job_id), self._proof_required)
            for who, why in refused:
                self._decisions.note(tx, job, f"a stop sent before the job came is not applied: {why}",
                                     actor=who, now=now)
            if chosen is None:
                return None
            reason, sender = chosen
            senders[job.job_id] = user_actor(sender)
            decision = gang.decide_stop(job, StopRequest(job_id=job.job_id, reason=reason), now)
            return None if decision.ignored or decision.duplicate else decision

        return applied + self._for_each_job(job_ids, "user", decide, senders.get)

    def before_claim(self, job_id: str) -> None:
        """A VM's claim of ``job_id`` is about to be decided: a stop kept for it is applied first, so the claim
        is answered RELEASE and the job never starts. The submission and the stop may each commit before seeing
        the other's row (``apply_early_stops``); the claim comes after the submission's commit (its start is
        published then), so it sees the kept stop, which the tick's sweep would apply a tick later, the job
        running meanwhile. One indexed read a claim, which finds a stop of the task's array too (kept under the
        array's id, it stops every task of it: a claim of any of them started it while the stop was kept)."""
        with self._store.session() as tx:
            kept = tx.kept_stop_names(job_id)
        if kept:
            self.apply_early_stops(kept)

    def admit_waiting(self) -> int:
        """The tick's admission passes: every queue with waiting jobs (quota raised, anything missed);
        without queues, the jobs left PENDING when they were removed (``admit_unqueued``); with them, the jobs
        of no queue (submitted before queues were configured, held then: no queue's pass reads them)."""
        if not self._decisions.queued:
            return self.admit_unqueued()
        with self._store.transaction() as tx:
            waiting = tx.waiting_queues()
        admitted = 0
        for queue, cluster in waiting:
            try:
                with self._store.transaction() as tx:
                    ids = self._decisions.admit(tx, queue, cluster, self._clock())
            except TransientError:
                raise
            except Exception:  # noqa: BLE001 - logged; the other queues' passes and the scaler still run
                log.exception("admission pass failed", extra={"queue": queue, "cluster": cluster})
                continue
            admitted += len({e.message.attributes.get("job_id") for e in ids if is_start(e.message, self._config.topics)})
            self._relay.flush_quietly(ids)
        return admitted + self.admit_unqueued(queue_less=True)

    def admit_unqueued(self, limit: int = 500, queue_less: bool = False) -> int:
        """Without ``queues:`` every job is admitted at once, but jobs still PENDING from when there
        were queues (the operator removed the section) would wait forever: nothing else admits them,
        and new submissions would go ahead of them. Each is admitted as any submission is now (QUEUED,
        its start published), oldest first. ``queue_less`` (with queues): the jobs of no queue, which were
        submitted before queues were configured and held then (a retry's backoff, dependencies, an array's
        turn), let go since: admitted as they would have been then. Returns how many."""
        with self._store.transaction() as tx:
            candidates = tx.pending_jobs(limit, queue_less)

        def decide(_: JobTx, job: Job) -> Decision | None:
            if job.status is not JobStatus.PENDING or job.hold is not None or (queue_less and job.queue):
                return None
            why = "submitted before queues were configured" if queue_less else "no queues are configured"
            return Decision(changes=[lifecycle.Change(JobStatus.QUEUED, f"admitted: {why}")], publish_start=True)

        return self._for_each_job(candidates, "admission", decide)

    def retry_due(self, limit: int = 500, held: int = 100) -> int:
        """Jobs whose retry's backoff is over (``zen.core.retries``): the hold lifted, admitted at once
        without queues, else into their queue's line (the tick's admission passes follow); and at most ``held`` jobs
        no region could run (``claims.held_uncleared``) looked at again, apart: many such never delay a retry.
        Returns how many changed."""
        with self._store.transaction() as tx:
            due = tx.retry_due(self._clock(), limit, stranding.UNCLEARED_HOLD, False)
            due += tx.retry_due(self._clock(), held, stranding.UNCLEARED_HOLD, True)
        queued = self._decisions.queued

        def decide(_: JobTx, job: Job) -> Decision | None:
            if job.status is not JobStatus.PENDING or job.hold_until is None:
                return None
            lifted: dict[str, object] = {"hold": None, "hold_until": None}
            if job.hold and job.hold.startswith(stranding.UNCLEARED_HOLD):  # nothing configured could run it
                if (still := stranding.unserved(self._config, job)) is not None:  # looked at again later (its reason
                    return stranding.kept_held(job, still, self._clock())  # rewritten where another change is why)
                lifted["regions"] = cleared = regions_cleared_now(self._config, job)
                why = f"the configuration lets it run in {cleared} again"
                if queued:
                    return Decision(fields=lifted, note=why)
                return Decision(changes=[lifecycle.Change(JobStatus.QUEUED, f"admitted: {why}")], fields=lifted,
                                publish_start=True)
            if queued:
                return Decision(fields=lifted, note=f"retry {job.retries}: its backoff is over")
            return Decision(changes=[lifecycle.Change(JobStatus.QUEUED, f"admitted: retry {job.retries}, its backoff "
                                                      "over")], fields=lifted, publish_start=True)

        return self._for_each_job(due, "retry", decide)

    def look_after(self, limit: int = 200) -> int:
        """Jobs held by dependencies, looked at again (one that ended while the job was being submitted
        found nothing to wake): ``DecisionWriter.after_ended``. Returns how many changed."""
        with self._store.transaction() as tx:
            held = tx.held_after(limit)

        def look(tx: JobTx, job_id: str) -> list[Enqueued]:
            job = tx.get_job(job_id, lock=True)
            if job is None or job.status is not JobStatus.PENDING or not dependencies.is_after_hold(job.hold):
                return []
            return self._decisions.after_ended(tx, job, self._clock())

        return self._each(held, "dependencies: job could not be looked at", look)

    def let_go_arrays(self, limit: int = 100) -> int:
        """Arrays with held tasks and room under their ``max_parallel`` (a release two concurrent ends
        both reached for: ``DecisionWriter.let_go``): the next tasks let go. Returns how many arrays let
        one go; each in a transaction of its own."""
        with self._store.transaction() as tx:
            held = tx.arrays_holding(limit)
        return self._each(held, "array: tasks could not be let go",
                          lambda tx, array_id: self._decisions.let_go(tx, array_id, self._clock()))

    def _each(self, keys: list[str], failed: str, work: Callable[[JobTx, str], list[Enqueued]]) -> int:
        """``work`` for each key in a transaction of its own, its messages published after it commits; one
        that fails is logged and the others go on. Returns how many sent messages."""
        changed = 0
        for key in keys:
            ids: list[Enqueued] = []
            try:
                with self._store.transaction() as tx:
                    ids = work(tx, key)
            except TransientError:
                raise
            except Exception:  # noqa: BLE001 - logged with its key; the tick goes on with the others
                log.exception(failed, extra={"job_id": key})
            changed += bool(ids)
            self._relay.flush_quietly(ids)
        return changed

    def _for_each_job(self, job_ids: list[str], actor: str, decide: Callable[[JobTx, Job], Decision | None],
                      actor_of: Callable[[str], str | None] = lambda _: None) -> int:
        """Re-read each job under lock, decide, apply; one bad job never blocks the others. The history
        names ``actor``, or ``actor_of(job_id)`` where ``decide`` learnt who (a stop's sender)."""
        changed = 0
        for job_id in job_ids:
            ids: list[Enqueued] = []
            try:
                with self._store.transaction() as tx:
                    job = tx.get_job(job_id, lock=True)
                    decision = decide(tx, job) if job else None
                    if job is not None and decision is not None:
                        ids = self._decisions.apply(tx, job, decision, actor=actor_of(job_id) or actor,
                                                    now=self._clock())
                        changed += 1
                        if decision.changes or decision.note or decision.publish_start:  # (not a hold kept: retry_due)
                            log.warning(f"{actor}: job changed", extra={
                                "job_id": job_id, "vm": job.vm,
                                "reason": decision.changes[0].reason if decision.changes
                                else decision.note or "start republished"})
            except TransientError:
                raise
            except Exception:  # noqa: BLE001 - logged with the job; the tick goes on with the others
                log.exception(f"{actor}: job could not be processed", extra={"job_id": job_id})
            self._relay.flush_quietly(ids)
        return changed
