"""An array's tasks in the job service (``zen.core.arrays`` says what an array is): created whole from one
submission or refused whole, stopped together by a stop that names the array. Letting held tasks go as
others end is the decision writer's (``DecisionWriter.let_go``), with the tick's sweep behind it
(``Sweeps.let_go_arrays``). The user's side: docs/how-to/arrays-and-pipelines.md.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable

from zen import telemetry
from zen.core import arrays, gang, lifecycle
from zen.core.clock import Clock
from zen.core.config import ZenConfig
from zen.core.lifecycle import Decision
from zen.core.models import Job, JobRequest, JobStatus, StopRequest, request_fingerprint
from zen.jobs.announce import Announcements, is_start
from zen.jobs.authorization import kept_stop, may_stop, user_actor
from zen.jobs.decisions import DecisionWriter, frees_quota
from zen.jobs.messaging import OutboxRelay, enqueue
from zen.jobs.outgoing import Enqueued
from zen.jobs.placement import choose, configured_cluster, held_gpus

if TYPE_CHECKING:
    from zen.jobs.store import JobStore, JobTx

log = logging.getLogger("zen.jobs.service")

ADMITTED = lifecycle.Change(JobStatus.QUEUED, "admitted")
# (tx, a job just created, now, stops kept for its array) -> (whether a stop kept before it came stopped it, messages)
KeptStop = Callable[["JobTx", Job, datetime, list[tuple[str, str | None]]], tuple[bool, list[Enqueued]]]


class _Refused(Exception):
    """An array that cannot be created as a whole (its transaction rolls back)."""


class ArrayJobs:
    def __init__(self, store: JobStore, config: ZenConfig, clock: Clock, relay: OutboxRelay,
                 decisions: DecisionWriter, announce: Announcements, *, queues: bool, proof_required: bool):
        self._store, self._config, self._clock, self._relay = store, config, clock, relay
        self._decisions, self._announce, self._queues = decisions, announce, queues
        self._proof_required = proof_required  # ZEN_AUTH=required: a kept stop applies only with its sender

    def submit(self, request: JobRequest, resolved: Any, template: Job, canonical: dict[str, Any], actor: str,
               now: datetime, submitted: lifecycle.Change,
               kept_stop: KeptStop) -> tuple[str | None, list[Job]]:
        """(why the array is refused, None if it is not; the tasks created, each QUEUED where admitted, else as made:
        none for a redelivery).

        All tasks in one transaction: each a PENDING job named ``<array id>-<index>``, those past
        ``max_parallel`` held; then admitted as any submission is (at once without queues, else by the
        queue's pass). A redelivery finds its first task with the same request and creates nothing; a
        task id that is another job's, or an array id that is a job's, refuses the whole array."""
        spec, array_id = request.array, template.job_id
        assert spec is not None
        problem = arrays.check_array(array_id, spec, self._config.limits.max_array_tasks, request.env,
                                     dict(request.secrets or {}))
        if problem:  # a redelivery of an array accepted before limits.max_array_tasks was lowered is not refused
            with self._store.transaction() as tx:
                redelivered = len(tx.array_tasks(array_id)) == spec.size and made_by(tx, canonical, array_id, spec, resolved)
            return (None if redelivered else problem), []
        created: list[Job] = []
        ids: list[Enqueued] = []
        try:
            with self._store.transaction() as tx:
                # jobs_one_namespace files task 0 under its array's id: array b's task b-0 holds no "b-0" for array
                # b-0's task b-0-0 to meet, and two such arrays submitted at once were both made. Each array takes its
                # id and its task 0's, so those two take "b-0" both, one after the other, and the second is refused.
                tx.lock_job_ids([array_id, arrays.task_id(array_id, 0)])
                if tx.get_job(array_id) is not None:
                    raise _Refused(_A_JOBS.format(array_id))
                if taken := tx.arrays_named([task_id for task_id, _ in arrays.tasks(canonical, array_id, spec)]):
                    raise _Refused(_AN_ARRAYS.format(taken[0], array_id))
                shape, chosen = choose(tx, self._config, resolved, now, request.provisioning, request.max_runtime_s)
                gpus = held_gpus(configured_cluster(self._config, shape.cluster), request)
                for task_id, task_request in arrays.tasks(canonical, array_id, spec):
                    index = task_request["array"]["index"]
                    held = spec.max_parallel is not None and index >= spec.max_parallel
                    task = template.model_copy(update={  # submitted in index order, a microsecond apart: each line
                        # that orders by submission (a queue's, the tick's look at held jobs) takes them so
                        "submitted_at": template.submitted_at + timedelta(microseconds=index),
                        "job_id": task_id, "request": resolved.stored(task_request)[0],  # with its data's tags
                        "request_hash": request_fingerprint(task_request),  # as sent: a redelivery's, whatever changed
                        "cluster": shape.cluster, "regions": shape.regions, "gpus": gpus,
                        "hold": template.hold or (arrays.hold_reason(array_id, spec.max_parallel or 0) if held else None)})
                    if not tx.insert_job(task):
                        existing = tx.get_job(task_id)
                        if index == 0 and existing is not None and (existing.request.get("array") or {}).get(
                                "id") == array_id:  # this id's array, made before: this one again, or another
                            if existing.request_hash in (task.request_hash, request_fingerprint(task.request)) and (
                                    made_by(tx, canonical, array_id, spec, resolved)):  # as sent; as an earlier version
                                return None, []  # a redelivery: every task is this array's
                            raise _Refused(f"job_id {array_id} is already an array's of other tasks (its tasks' "
                                           "requests differ): reusing it for a different array is refused")
                        if existing is None:  # a job or array of the name, made meanwhile (jobs_one_namespace)
                            raise _Refused(_A_JOBS.format(array_id) if tx.get_job(array_id)
                                           else _AN_ARRAYS.format(task_id, array_id))
                        raise _Refused(f"job_id {task_id} (task {index} of array {array_id}) is already used by "
                                       "another job")
                    reason = f"{submitted.reason}; task {index} of array {array_id}" + (
                        f"; {chosen}" if chosen else "") + (f"; held: {task.hold}" if task.hold else "")
                    pending = lifecycle.Change(JobStatus.PENDING, reason)
                    history, events = self._announce.history(task, task, [pending], actor=actor, now=now,
                                                             from_status=None)
                    tx.add_job_events(history)
                    telemetry.log_changes(log, task, task, [pending], None)  # zen_job_status_changes, as its history
                    ids += enqueue(tx, events, now)
                    created.append(task)
                ids += self._admit(tx, array_id, created, now, kept_stop)
        except _Refused as refused:
            return str(refused), []
        self._relay.flush_quietly(ids)
        log.info("array submitted", extra={"job_id": array_id, "cluster": shape.cluster, "tasks": len(created)})
        # Each task as its submission left it: QUEUED where admitted (its start sent), else PENDING (its queue's quota
        # full, held by max_parallel) or stopped by a stop kept for it: the caller scales for the admitted alone.
        started = {e.message.attributes.get("job_id") for e in ids if is_start(e.message, self._config.topics)}
        return None, [t.model_copy(update={"status": JobStatus.QUEUED}) if t.job_id in started else t for t in created]

    def _admit(self, tx: JobTx, array_id: str, created: list[Job], now: datetime,
               kept_stop: KeptStop) -> list[Enqueued]:
        ids: list[Enqueued] = []
        # A stop of a task or of the array that came before it (Pub/Sub does not order across topics): held
        # tasks first, so that no task ending lets one go on the way.
        of_array = tx.take_early_stops(array_id)
        stopped_ids: set[str] = set()
        for task in reversed(created):
            stopped, kept = kept_stop(tx, task, now, of_array)
            ids += kept
            if stopped:
                stopped_ids.add(task.job_id)
        for task in created:
            if task.job_id not in stopped_ids and task.hold is None and not self._queues:
                ids += self._decisions.apply(tx, task, Decision(changes=[ADMITTED], publish_start=True),
                                             actor="admission", now=now)
        if stopped_ids and (arrays.place_of(created[0].request) or {}).get("max_parallel"):
            ids += self._decisions.let_go(tx, array_id, now, admit=False)  # a stopped task's place, as its end would
        if created and self._queues:
            assert created[0].queue is not None  # resolve_request names one when queues are configured
            ids += self._decisions.admit(tx, created[0].queue, created[0].cluster, now)
        return ids

    def stop(self, request: StopRequest, sender: str | None) -> tuple[int, str | None] | None:
        """A stop that names an array (no job has its id; tasks carry it): (tasks stopped, why one was
        not, if one was refused); None when it names no array. Each task not ended is stopped as its own
        stop would stop it (``_stop_tasks``); where every task ended, a sender who may not stop the array
        (its tasks share one owner and queue) is refused all the same, as a job's stop is whatever its state."""
        refused: list[str] = []

        def chosen(_: JobTx) -> Callable[[Job], tuple[str | None, str] | None]:
            def choose(job: Job) -> tuple[str | None, str] | None:
                if sender is not None and (why := may_stop(self._config, sender, job)):
                    refused.append(why)
                    return None
                return request.reason, user_actor(sender)
            return choose

        stopped = self._stop_tasks(request.job_id, chosen)
        if stopped is None:
            return None
        if sender is not None and not stopped and not refused:  # every task ended: its sender is checked all the same
            with self._store.transaction() as tx:
                first = next(iter(tx.array_tasks(request.job_id)), None)
            if first is not None and (why := may_stop(self._config, sender, first)):
                refused.append(why)
        log.info("array stopped", extra={"job_id": request.job_id, "tasks": stopped})
        return stopped, refused[-1] if refused else None

    def apply_kept_stops(self, array_id: str) -> int:
        """The stops kept for ``array_id`` while no job or array had that id, now that it names an array:
        each task not ended is stopped by the first kept stop whose sender may stop it
        (``authorization.kept_stop``); the others are noted on the task. How many stopped (0 when
        ``array_id`` names no array)."""
        now = self._clock()

        def chosen(tx: JobTx) -> Callable[[Job], tuple[str | None, str] | None]:
            kept = tx.take_early_stops(array_id)

            def choose(job: Job) -> tuple[str | None, str] | None:
                stop, refused = kept_stop(self._config, job, kept, self._proof_required)
                for who, why in refused:
                    self._decisions.note(tx, job, f"a stop sent before the array came is not applied: {why}",
                                         actor=who, now=now)
                return None if stop is None else (stop[0], user_actor(stop[1]))
            return choose

        return self._stop_tasks(array_id, chosen) or 0

    def _stop_tasks(self, array_id: str,
                    chosen: Callable[[JobTx], Callable[[Job], tuple[str | None, str] | None]]) -> int | None:
        """Stop each task of ``array_id`` not ended that ``chosen(tx)`` gives (reason, actor) for, every node of
        a gang, in index order (the order releases lock them in), in one transaction; none is let go
        meanwhile, and each queue's admission pass runs once after (the quota the tasks held), then those of
        the jobs their ends let go or cancelled (``after``). How many stopped; None when ``array_id`` names a
        job or no task.

        Every task not ended is locked before any is stopped: a task's end locks the jobs waiting for the array,
        and a report ending a later task holds that task and waits for them (locked one by one, the two
        deadlocked, and Postgres failed one: the report or the stop, redelivered later). No task's change moves
        another of its array (none waits for its own array), so the rows read under lock stay current."""
        now = self._clock()
        ids: list[Enqueued] = []
        stopped = 0
        released: dict[tuple[str, str], int] = {}  # (queue, cluster) -> the GPUs the stopped tasks gave back
        later: set[tuple[str, str]] = set()  # the passes of the jobs waiting for them, let go or cancelled
        with self._store.transaction() as tx:
            if tx.get_job(array_id) is not None or not (tasks := tx.array_tasks(array_id)):
                return None
            locked = [tx.get_job(listed.job_id, lock=True) for listed in tasks if not listed.status.terminal]
            choose = chosen(tx)
            for job in locked:
                if job is None or job.status.terminal or (stop := choose(job)) is None:
                    continue
                decision = gang.decide_stop(job, StopRequest(job_id=job.job_id, reason=stop[0]), now)
                if decision.ignored or decision.duplicate:
                    continue
                ids += self._decisions.apply(tx, job, decision, actor=stop[1], now=now, admit=False, passes=later)
                stopped += 1
                if job.queue:  # what they held since the last pass counts in its fair-share usage (it was lost)
                    to = decision.changes[-1].to if decision.changes else job.status
                    key = (job.queue, job.cluster)
                    released[key] = released.get(key, 0) + (job.gpus if frees_quota(job.status, to) else 0)
            theirs = sorted(later - released.keys())  # after: the first pass over a cohort brings its usage up to now
            self._decisions.lock_passes(tx, sorted(released) + theirs)  # all before the first (passes' locks, one order)
            for (queue, cluster), gpus in sorted(released.items()) if self._queues else ():
                ids += self._decisions.admit(tx, queue, cluster, now, released=gpus)
            for queue, cluster in theirs if self._queues else ():
                ids += self._decisions.admit(tx, queue, cluster, now)
        self._relay.flush_quietly(ids)
        return stopped


_A_JOBS = "job_id {} is already a job's: an array's id names no job of its own"
_AN_ARRAYS = ("job_id {}, a task's id of array {}, is already an array's id: its tasks' ids would name another's "
              "(choose another job_id)")


def made_by(tx: JobTx, canonical: dict[str, Any], array_id: str, spec: arrays.ArraySpec, resolved: Any = None) -> bool:
    """Whether the array ``array_id``'s tasks are those this request (``canonical``, as sent) makes (a redelivery), each
    by its request's fingerprint. (Taken as stored, with the tags ``data_clearance`` widened it to, a redelivery after
    the clearance changed was refused as another array's; a job's was the request as sent already.) Tasks stored so
    by an earlier version are this request's too when ``resolved`` (its placement now) widens it as they were."""
    made = arrays.tasks(canonical, array_id, spec)
    have = {task.job_id: task.request_hash for task in tx.array_tasks(array_id)}
    return have == {task_id: request_fingerprint(request) for task_id, request in made} or (
        resolved is not None and have == {task_id: request_fingerprint(resolved.stored(r)[0]) for task_id, r in made})
