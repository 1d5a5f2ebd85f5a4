"""Writing a decision (``zen.core.lifecycle.Decision``) inside the caller's transaction: the job's row, one
history row and event per change, the usage of the attempt it ends, the VM's orders, the start message
(routed afresh: ``zen.core.routing``), and, when the change frees a queue's quota or a waiting job leaves
the line, the admission pass that follows (``zen.jobs.queueing``). The job service, its sweeps and the
VM heartbeat all write through one ``DecisionWriter``."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from zen import telemetry
from zen.core import arrays, dependencies, gang, gang_ends, lifecycle, silence
from zen.core.config import ZenConfig
from zen.core.lifecycle import Decision
from zen.core.prices import attempt_price
from zen.core.models import ControlAction, Heartbeat, Job, JobRequest, JobStatus
from zen.core.routing import EVERYWHERE, Route, first_route, warm_keys
from zen.jobs.announce import Announcements
from zen.jobs.authorization import may_stop
from zen.jobs.messaging import enqueue
from zen.jobs.outgoing import Enqueued, OutgoingMessage
from zen.jobs.queueing import Queueing

if TYPE_CHECKING:
    from zen.jobs.store import JobStore, JobTx

log = logging.getLogger("zen.jobs.service")

ADMISSION_PASSES = 200  # passes one change runs at most, each freeing the quota for one preemptor
# Statuses that hold a queue's quota: from admission to the end (LOST is on its way back to QUEUED).
_HOLDS_QUOTA = frozenset({JobStatus.QUEUED, JobStatus.ASSIGNED, JobStatus.RUNNING, JobStatus.STOPPING,
                          JobStatus.LOST})


def frees_quota(before: JobStatus, after: JobStatus) -> bool:
    """Whether a change from ``before`` to ``after`` gives its queue's quota back (the admission pass after it
    counts the GPUs as held until then: ``Queueing.admit``'s ``released``)."""
    return before in _HOLDS_QUOTA and after not in _HOLDS_QUOTA


class DecisionWriter:
    def __init__(self, store: JobStore, config: ZenConfig, announce: Announcements, queues: Queueing | None):
        self._store = store
        self._config = config
        self._announce = announce
        self._queues = queues  # None: no queues, every job admitted at once

    @property
    def queued(self) -> bool:
        """Whether jobs are admitted by queues (else at once)."""
        return self._queues is not None

    def route(self, job: Job, now: datetime, tx: JobTx | None = None) -> Route:
        """Where the start goes first; the fleet is read (in ``tx``, else on its own) only if needed. A gang's
        goes everywhere: the first node to claim narrows it to its region (``zen.core.gang``)."""
        if gang_ends.is_gang(job):
            return EVERYWHERE
        def read(query: Callable[[JobTx], Any]) -> Any:
            with nullcontext(tx) if tx is not None else self._store.session() as own:
                return query(own)
        return first_route(self._config, job, now, lambda: read(lambda t: t.blocked_regions(job.cluster, now)),
                           lambda: read(lambda t: t.vms_holding(job.cluster, job.regions, *warm_keys(job), now)))

    def apply(self, tx: JobTx, job: Job, decision: Decision, *, actor: str, now: datetime,
              admit: bool = True, answering: Heartbeat | None = None,
              seal: Callable[[], str | None] | None = None,
              passes: set[tuple[str, str]] | None = None) -> list[Enqueued]:
        """Write a decision: the row, one history row and event per change, controls (those to the VM that
        sent ``answering`` about its attempt say which report they answer, a CONFIRM its ``seal()``), start.
        ``passes``: the (queue, cluster) admission passes of the jobs waiting for it, run by the change they
        follow from (a job's end, after its own pass) rather than here."""
        if not decision.changes_job and not decision.controls and not decision.publish_start:
            return []
        status = decision.changes[-1].to if decision.changes else job.status
        update: dict[str, Any] = dict(decision.fields, status=status)
        if update.get("attempt", job.attempt) != job.attempt:  # VMs that gave the last attempt up: not this one's
            update["left_vms"] = None
        changes = decision.changes
        if any(c.to is JobStatus.QUEUED for c in changes):
            update["queued_at"] = now
            if decision.publish_start:  # a new attempt's start: routed afresh (zen.core.routing)
                route = self.route(job.model_copy(update=update), now, tx)
                update.update(route.fields())
                if route.note:
                    changes = changes[:-1] + [lifecycle.Change(JobStatus.QUEUED, f"{changes[-1].reason}; {route.note}")]
        if decision.publish_start:
            update["start_published_at"] = now
        after = job.model_copy(update=update)
        messages: list[OutgoingMessage] = []
        if decision.changes_job or decision.publish_start:
            tx.save_job(job, after, [c.to for c in changes], now)
            history, events = self._announce.history(job, after, changes, actor=actor, now=now,
                                                     from_status=job.status)
            if decision.note:
                history.append(self._announce.note(after, decision.note, actor=actor, now=now))
            tx.add_job_events(history)
            self._record_usage(tx, job, after, decision, now)
            telemetry.log_changes(log, job, after, changes, job.status)
            messages += events
        left = silence.stop_left_s(after, now, self._config.deadlines, losing := gang_ends.losing_node(after))
        moves = bool(after.preempted_by) or losing  # that wait counts from the VM's last RUNNING (silence.stop_left_s)
        holders = {after.vm, *(node.vm for node in after.gang or ())}  # a gang's every node is told as rank 0 is
        claims = {node.vm: node.seq for node in after.gang or ()}  # a gang's CONFIRM answers each node's last claim
        messages += [self._announce.control(c, answering, left if c.vm in holders and c.attempt == after.attempt
                                            else None, refused=decision.refused, seal=seal, answers=claims.get(c.vm)
                                            if c.action is ControlAction.CONFIRM else None, moves=moves, made=now)
                     for c in decision.controls]  # made: what the wait counts from (zen.core.stops.MADE)
        if decision.publish_start:
            messages += self._announce.start(after)[:decision.start_copies]
        ids = enqueue(tx, messages, now)
        place = arrays.place_of(job.request)
        if (admit and place and place.get("max_parallel") and (job.hold is None or job.hold_until is not None)
                and not job.status.terminal and after.status.terminal):  # a task let go (its retry's backoff too)
            ids += self.let_go(tx, place["id"], now, admit=False)  # its place in the array is free
        later: set[tuple[str, str]] = set() if passes is None else passes  # the passes of the jobs let go
        if after.status.terminal and not job.status.terminal:  # the jobs that wait for it (zen.core.dependencies)
            names = [job.job_id] + ([place["id"]] if place else [])
            for waiting in tx.waiting_after(names):
                # Read again: an earlier one's move may have moved it (b after a, c after a and b: a's end
                # cancels b, whose end cancels c before the loop reaches c).
                current = tx.get_job(waiting.job_id, lock=True)
                if current and current.status is JobStatus.PENDING and dependencies.is_after_hold(current.hold):
                    ids += self.after_ended(tx, current, now, passes=later)
        frees = frees_quota(job.status, after.status)
        left_line = job.status is JobStatus.PENDING and after.status.terminal  # a waiting job left the line
        own = bool(admit and self._queues and job.queue and (frees or left_line))
        if own and passes is not None and not frees:  # a waiting job cancelled by the end of one it waited for
            passes.add((str(job.queue), job.cluster))
            own = False
        # Theirs only after its own: the first pass over a cohort brings its queues' fair-share usage up to this
        # moment, and this job's GPUs count as held until then only in its own pass (``released``). Without
        # ``admit`` the caller runs its pass, and one that ends jobs (``ArrayJobs._stop_tasks``) passes ``passes``.
        done = {(job.queue, job.cluster)} if own or not admit else set()
        theirs = sorted(later - done) if passes is None else []
        if len(planned := ([(str(job.queue), job.cluster)] if own else []) + theirs) > 1:
            self.lock_passes(tx, planned)
        if own:  # who is next (into the quota, or past it)
            ids += self.admit(tx, str(job.queue), job.cluster, now, released=job.gpus if frees else 0)
        for queue, cluster in theirs:
            ids += self.admit(tx, queue, cluster, now)
        return ids

    def lock_passes(self, tx: JobTx, passes: list[tuple[str, str]]) -> None:
        """Take the locks of the admission passes one change runs in turn, all together and in one order, before the
        first (``Queueing.lock``): an end ran its own queue's pass, then those of the jobs it let go, so two ends at once,
        each letting go a job of the other's queue, took two queues' locks in opposite orders and deadlocked (Postgres
        failed one of the two: its report answered 500 and was delivered again later)."""
        if self._queues is not None:
            self._queues.lock(tx, passes)

    def let_go(self, tx: JobTx, array_id: str, now: datetime, *, admit: bool = True) -> list[Enqueued]:
        """Let an array's held tasks go, lowest index first, while fewer than its ``max_parallel`` are let
        go and not ended: admitted at once without queues; with queues, into their queue's line (its
        admission pass follows, here when ``admit``, else in the caller's). Two tasks ending at once may
        both reach for the same next task: one lets it go, the other finds none and stops, and the tick's
        sweep (``Sweeps.let_go_arrays``) lets the next one go."""
        ids: list[Enqueued] = []
        queue: tuple[str, str] | None = None
        while (task := tx.array_next_held(array_id)) is not None:
            limit = int((arrays.place_of(task.request) or {}).get("max_parallel") or 0)
            if limit and tx.array_let_go(array_id) >= limit:
                break
            reason = f"let go: fewer than {limit} tasks of array {array_id} run"
            if self._queues is None:
                decision = Decision(changes=[lifecycle.Change(JobStatus.QUEUED, f"admitted; {reason}")],
                                    fields={"hold": None}, publish_start=True)
            else:
                decision = Decision(fields={"hold": None}, note=reason)
                queue = (task.queue, task.cluster) if task.queue else queue
            ids += self.apply(tx, task, decision, actor="array", now=now, admit=False)
        if admit and queue is not None:
            ids += self.admit(tx, queue[0], queue[1], now)
        return ids

    def after_hold(self, request: JobRequest, job_id: str, principal: str) -> tuple[str | None, str | None]:
        """(why a job with ``after`` is refused, the hold it starts with): every id a job or an array its
        submitter may see, none ended already in a way that would cancel it. (None, None): it may start."""
        with self._store.session() as tx:
            for dep in request.after or ():
                known = tx.get_job(dep) or tx.get_job(arrays.task_id(dep, 0))  # an array: its first task
                if known is not None and known.job_id != dep and (arrays.place_of(known.request) or {}).get("id") != dep:
                    known = None  # a job of that name, of no array dep
                if known is None:
                    return (f"after: no job or array {dep} is known (submit it first; an id Zen has not accepted "
                            "yet is refused, so no cycle can be made)"), None
                if refused := may_stop(self._config, principal, known):
                    return f"after: {dep}: {refused.replace('may not stop', 'may not wait for')}", None
            action, why = dependencies.verdict(request.after_condition or "ok", self._ends(tx, request.after or []))
        if action == "cancel":
            return f"after: {why}: this job could never start", None
        return None, why

    def _ends(self, tx: JobTx, names: list[str]) -> dict[str, str | None]:
        """Each dependency's end: its status once terminal (an array: SUCCEEDED when every task did, else
        the first other end, once all ended); None while it runs or waits."""
        ends: dict[str, str | None] = {}
        for name in names:
            job = tx.get_job(name)  # an array: counted in Postgres, not read task by task (it may hold thousands)
            tasks, unended, other = ((1, int(not job.status.terminal), None if job.status is JobStatus.SUCCEEDED
                                      else job.status.value) if job is not None else tx.array_end(name))
            ends[name] = "gone" if not tasks else None if unended else other or "SUCCEEDED"
        return ends

    def after_ended(self, tx: JobTx, job: Job, now: datetime,
                    passes: set[tuple[str, str]] | None = None) -> list[Enqueued]:
        """A job held by dependencies, looked at again (one of them ended, or the tick): cancelled with the
        reason, let go (admitted, into its queue's line, or as its array's next task), or held still. Its
        queue's admission pass is run here, or added to ``passes`` (``apply``'s)."""
        action, why = dependencies.verdict(job.request.get("after_condition") or "ok",
                                           self._ends(tx, list(job.request.get("after") or [])))
        actor = "dependencies"
        if action == "wait":
            return [] if why == job.hold else self.apply(tx, job, Decision(fields={"hold": why}), actor=actor, now=now)
        if action == "cancel":
            return self.apply(tx, job, Decision(changes=[lifecycle.Change(JobStatus.CANCELLED, str(why))],
                                                fields={"finished_at": now, "hold": None}), actor=actor, now=now,
                              passes=passes)
        place = arrays.place_of(job.request)
        later = passes is not None and self._queues is not None and bool(job.queue)  # its pass: after the end's
        if passes is not None and later:
            passes.add((str(job.queue), job.cluster))
        if place and place.get("max_parallel"):  # its array lets it go when it has room
            held = arrays.hold_reason(place["id"], int(place["max_parallel"]))
            ids = self.apply(tx, job, Decision(fields={"hold": held}), actor=actor, now=now, admit=False)
            return ids + self.let_go(tx, place["id"], now, admit=not later)
        reason = "its dependencies ended as it needs"
        if self._queues is None:
            return self.apply(tx, job, Decision(changes=[lifecycle.Change(JobStatus.QUEUED, f"admitted: {reason}")],
                                                fields={"hold": None}, publish_start=True), actor=actor, now=now)
        ids = self.apply(tx, job, Decision(fields={"hold": None}, note=reason), actor=actor, now=now)
        return ids + (self.admit(tx, job.queue, job.cluster, now) if job.queue and not later else [])

    def note(self, tx: JobTx, job: Job, text: str, *, actor: str, now: datetime) -> None:
        """A history row that changes nothing of the job (why a message did not apply to it)."""
        tx.add_job_events([self._announce.note(job, text, actor=actor, now=now)])

    def _record_usage(self, tx: JobTx, job: Job, after: Job, decision: Decision, now: datetime) -> None:
        """The usage of the attempt this change ends, in its transaction (after its history rows: the claim)."""
        outcome = attempt_outcome(job, after, decision.changes)
        if after.attempt < job.attempt and after.status.terminal:  # a lost attempt's late end (zen.jobs.late_final)
            tx.record_late_outcome(job.job_id, after.attempt, after.status.value)
            outcome = None if outcome is None else "STOPPED"  # its rerun, held by a VM, told STOP: not its outcome
        if outcome is None:
            return
        cluster = self._config.cluster(job.cluster)  # the VM's shape; the attempt held job.gpus of its GPUs
        vm_gpus = cluster.gpu_count if cluster else job.gpus
        gpus = job.gpus or vm_gpus  # 0: a row from before jobs recorded their GPUs, which held the whole VM
        if job.nodes == 1 and gpus < vm_gpus and job.vm and tx.vm_shares(job.vm) is False:
            gpus = vm_gpus  # its VM runs one job at a time (booted before max_jobs_per_vm was raised): it held it whole
        ended = min(now, decision.ended_at or now)  # a final report's publish time (zen.core.report_end), else now
        nodes, held = _vms_held(job, ended)  # a gang: its nodes, each until its own end (its VM is free after it)
        tx.record_attempt(
            job, outcome=outcome, machine_type=cluster.machine_type if cluster else None, gpus=gpus,
            ran_from=after.started_at if after.attempt == job.attempt else job.started_at, now=ended,
            vm_share=nodes if job.nodes > 1 else min(1.0, gpus / vm_gpus) if vm_gpus else 1.0,
            price=attempt_price(self._config.pricing, cluster, held, job.region) if cluster else None,
            gpu_factor=nodes / job.nodes)

    def admit(self, tx: JobTx, queue: str, cluster: str, now: datetime, released: int = 0) -> list[Enqueued]:
        """Run the admission pass of ``queue``'s cohort on ``cluster`` and admit what it picks.

        Victims are applied without the pass a release runs (``apply(admit=False)``): a victim not
        yet on a VM goes back to PENDING at once, and a pass nested in that change would preempt the
        next victim itself, leaving this loop a stale copy of it (``ConcurrentChange``: the
        submission or the tick fails, again at every redelivery). One pass after all of them admits
        into the quota they freed; victims stopping on a VM free theirs when the VM answers."""
        assert self._queues is not None  # called only with queues configured
        ids: list[Enqueued] = []
        freed, passes = True, 0
        # A loop, not a recursion (a long line of preemptors must not exhaust the stack), and bounded: a
        # pass that undid the last one's choice would hold the cohort's lock forever (the tick goes on).
        while freed and (passes := passes + 1) <= ADMISSION_PASSES:
            decided = self._queues.admit(tx, queue, cluster, now, released=released)
            released = 0  # given back before the first pass, which counted it
            for job, reason in decided.admitted:
                ids += self.apply(tx, job, Decision(changes=[lifecycle.Change(JobStatus.QUEUED, reason)],
                                                         publish_start=True), actor="admission", now=now)
                ids += enqueue(tx, [self._announce.queue_event("job.admitted", job, reason, now)], now)
            for job, reason in decided.preempted:
                ids += enqueue(tx, [self._announce.queue_event("job.preempted", job, reason, now)], now)
                ids += self.apply(tx, job, gang.decide_preempt(job, reason, now), actor="admission",
                                  now=now, admit=False)
            freed = any(job.status is JobStatus.QUEUED for job, _ in decided.preempted)  # who is next
        return ids


def _vms_held(job: Job, now: datetime) -> tuple[float, list[tuple[str | None, float]]]:
    """The VMs an attempt ending ``now`` held on average over its usage, and each VM with its share of that
    time (shares adding up to 1): one VM's job, its VM whole; a gang's nodes (rank order), each from the gang's
    claim (its completion, as its usage row: ``GangNode.confirmed_at``, else its run's start) until its own
    final report (``beat_at``: its VM takes other work after it, ``zen.jobs.claims``), or until ``now``;
    ``job.nodes`` and the nodes alike for a gang that never ran."""
    nodes = sorted(job.gang or [], key=lambda n: n.rank)
    if job.nodes <= 1:
        return 1.0, [(job.vm, 1.0)]
    start = next((n.confirmed_at for n in nodes if n.confirmed_at is not None), None) or job.started_at
    if len(nodes) != job.nodes or start is None or (wall := (now - start).total_seconds()) <= 0:
        return float(job.nodes), [(n.vm, 1 / len(nodes)) for n in nodes] or [(job.vm, 1.0)]
    held = [min(wall, max(0.0, (n.beat_at - start).total_seconds())) / wall if n.status in gang.ENDED else 1.0
            for n in nodes]
    total = sum(held)
    return total, [(n.vm, share / total if total else 1 / len(nodes)) for n, share in zip(nodes, held)]


def attempt_outcome(job: Job, after: Job, changes: list[lifecycle.Change]) -> str | None:
    """How the attempt ``job`` is at ended, when this change ends one that held a VM (its usage is then
    recorded: ``zen.store.usage``); None when no VM-held attempt ends. SUCCEEDED and FAILED: the job's
    own exit; STOPPED: stopped on request (or its VM went away while stopping); LOST: its VM went
    silent or was preempted by the cloud (requeued, or FAILED once the budget is spent); PREEMPTED:
    admission took it back (``decide_preempt``). An attempt never claimed by a VM used nothing."""
    if not job.status.holds_vm or not job.vm:
        return None
    if not after.status.terminal and after.attempt == job.attempt:
        return None
    steps = {change.to for change in changes}
    if JobStatus.LOST in steps:
        return "LOST"
    if JobStatus.PENDING in steps:  # taken back by admission (preempted_by), else a failure to retry
        return "PREEMPTED" if job.preempted_by else "FAILED"
    if after.status is JobStatus.CANCELLED:
        return "STOPPED"
    return str(after.status.value)  # a narrowed enum's value reads as Any to mypy; it is the str
