"""The rows of the in-memory job store (``zen_dev.fakes.jobstore``) and its unit of work, ``InMemoryJobTx``:
each ``zen.jobs.store.JobTx`` operation as its query in ``zen/store/queries.sql`` filters and orders."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Protocol, Sequence

from zen.core import arrays, dependencies
from zen.core.errors import DataRejected
from zen.core.lifecycle import UNSPENT
from zen.core.models import Job, JobStatus, VmState, illegal_step
from zen.core.prices import AttemptPrice
from zen.core.text import escape_unstorable
from zen.jobs.outgoing import Enqueued, OutgoingMessage
from zen.jobs.store import ConcurrentChange, ProbeLook, StoreHooks, hooked
from zen.store.fleet import WARM_VM_SEEN_S  # the same rules as the Postgres store's
from zen.store.rejections import KEEP_S as REJECTIONS_KEEP_S

HELD = (JobStatus.ASSIGNED, JobStatus.RUNNING, JobStatus.STOPPING)  # on a VM
HOLDS_QUOTA = (JobStatus.QUEUED, JobStatus.ASSIGNED, JobStatus.RUNNING, JobStatus.STOPPING, JobStatus.LOST)
VM_STATES = frozenset(state.value for state in VmState)
# What ``save_job`` writes (update_job's SET list); the rest of the row is the inserted one's.
SAVED = ("status", "attempt", "max_attempts", "vm", "region", "zone", "last_seq", "last_heartbeat_at", "queued_at",
         "started_at", "finished_at", "exit_code", "message", "start_published_at", "preempted_by", "preemptions",
         "stop_reason", "start_regions", "widen_at", "start_vms", "regions", "hold", "hold_until", "retries", "gang",
         "left_vms", "heard_at", "fence_timeout_s")


@dataclass
class Tables:
    """The rows. Rows are never changed in place (a change replaces the row), so a shallow copy of each
    table is a snapshot a unit of work rolls back to."""

    jobs: dict[str, Job] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    # (job_id, sender or "") -> reason, at, sender
    early_stops: dict[tuple[str, str], tuple[str, datetime, str | None]] = field(default_factory=dict)
    tick_clock: dict[str, Any] | None = None
    outbox: dict[int, dict[str, Any]] = field(default_factory=dict)
    queue_usage: dict[tuple[str, str], tuple[float, datetime]] = field(default_factory=dict)
    attempt_usage: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    rejections: list[dict[str, Any]] = field(default_factory=list)
    vms: dict[str, dict[str, Any]] = field(default_factory=dict)
    drained: frozenset[str] = frozenset()
    blocked: dict[tuple[str, str], datetime] = field(default_factory=dict)  # (cluster, region) -> until
    stocked_out: dict[tuple[str, str], datetime] = field(default_factory=dict)  # (cluster, region) -> last found
    gang_rooms: dict[tuple[str, str], tuple[int, datetime | None]] = field(default_factory=dict)  # (cluster, pool) -> (the planner's gang_room, when)

    def copy(self) -> Tables:
        return Tables(**{f.name: _shallow(getattr(self, f.name)) for f in fields(self)})


def _shallow(value: Any) -> Any:
    return value.copy() if isinstance(value, (dict, list)) else value


class _Store(Protocol):
    """What a unit of work sees of ``zen_dev.fakes.jobstore.InMemoryJobStore``."""

    hooks: StoreHooks
    tables: Tables

    def next_id(self) -> int: ...


class InMemoryJobTx:
    """One unit of work of ``InMemoryJobStore`` (a ``zen.jobs.store.JobTx``)."""

    def __init__(self, store: _Store):
        self._store = store
        self.hooks = store.hooks

    @property
    def _t(self) -> Tables:
        return self._store.tables

    # -- jobs and history -------------------------------------------------------------------
    @hooked("get_job")
    def get_job(self, job_id: str, *, lock: bool = False) -> Job | None:
        return self._t.jobs.get(job_id)

    @hooked("insert_job")
    def insert_job(self, job: Job) -> bool:
        if job.job_id in self._t.jobs or self._name_taken(arrays.name_key(job.job_id, job.request)):
            return False  # its id, or one namespace for jobs' and arrays' ids (jobs_one_namespace)
        self._t.jobs[job.job_id] = fresh(job, status=job.status, at=job.submitted_at)
        return True

    def _name_taken(self, name: str) -> bool:
        """Whether a row holds ``name`` (arrays.name_key): a job or task of that id, or the task 0 of an array."""
        return any(row is not None and arrays.name_key(row.job_id, row.request) == name
                   for row in (self._t.jobs.get(name), self._t.jobs.get(arrays.task_id(name, 0))))

    @hooked("save_job")
    def save_job(self, before: Job, after: Job, path: list[JobStatus], now: datetime) -> None:
        bad = illegal_step(before.status, path)
        if bad or (path and path[-1] != after.status) or (not path and after.status != before.status):
            raise ConcurrentChange(f"illegal transition for {before.job_id}: {before.status.value} -> {path}")
        stored = self._t.jobs.get(before.job_id)
        if stored is None or (stored.status, stored.attempt) != (before.status, before.attempt):
            raise ConcurrentChange(f"job {before.job_id} changed under a lock")
        self._t.jobs[before.job_id] = stored.model_copy(
            update={**{name: getattr(after, name) for name in SAVED}, "updated_at": now})

    @hooked("add_job_events")
    def add_job_events(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self.event(row["job_id"], row["at"], row["actor"], row["attempt"], row["from_status"],
                        row["to_status"], row["reason"])

    def event(self, job_id: str, at: datetime, actor: str, attempt: int, from_status: str | None,
               to_status: str, reason: str) -> None:
        self._t.events.append({"id": self._store.next_id(), "job_id": job_id, "at": at, "actor": actor,
                               "attempt": attempt, "from_status": _value(from_status),
                               "to_status": _value(to_status), "reason": reason})

    @hooked("job_history")
    def job_history(self, job_id: str) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "job_id"} for e in self._t.events if e["job_id"] == job_id]

    @hooked("record_progress")
    def record_progress(self, *, job_id: str, attempt: int, vm: str, seq: int, message: str | None,
                        now: datetime, vm_since: datetime | None = None) -> bool:
        job = self._t.jobs.get(job_id)
        if job is None or (job.status, job.attempt, job.vm) != (JobStatus.RUNNING, attempt, vm) or job.last_seq >= seq:
            return False
        if vm_since is not None and (job.started_at is None or job.started_at < vm_since):
            return False  # its VM made after the attempt started (zen.core.incarnation): the general path
        if job.gang:  # a gang's node reports per node (zen.core.gang): the general path
            return False
        self._t.jobs[job_id] = job.model_copy(update={"last_seq": seq, "last_heartbeat_at": now, "updated_at": now,
                                                      "message": message})
        return True

    @hooked("held_jobs_silent_since")
    def held_jobs_silent_since(self, cutoff: datetime, limit: int, stop_cutoff: datetime | None = None,
                               preempted_cutoff: datetime | None = None, timeout_s: float | None = None) -> list[str]:
        def own(j: Job) -> datetime:  # each kind of held job's deadline, as the Postgres store's query
            # a longer fence than timeout_s: that much before (fence_timeout_s), a rerun after a STOP's too
            longer = 0.0 if timeout_s is None or j.fence_timeout_s is None else max(j.fence_timeout_s - timeout_s, 0.0)
            if j.status is not JobStatus.STOPPING:
                return cutoff - timedelta(seconds=longer)
            if j.preempted_by is not None or (j.nodes > 1 and j.stop_reason is None):  # taken back
                taken_back = preempted_cutoff or stop_cutoff or cutoff
                return min(taken_back, cutoff - timedelta(seconds=longer)) if longer else taken_back
            return stop_cutoff or cutoff

        silent = [(j.last_heartbeat_at or j.updated_at, j.job_id) for j in self._t.jobs.values()
                  if j.status in HELD and (j.last_heartbeat_at or j.updated_at) < own(j)]
        return [job_id for _, job_id in sorted(silent)[:limit]]

    @hooked("queued_jobs_published_before")
    def queued_jobs_published_before(self, cutoff: datetime, limit: int) -> list[str]:
        waiting = [(published, j.job_id) for j in self._t.jobs.values()
                   if j.status is JobStatus.QUEUED and (published := j.start_published_at or j.queued_at) is not None
                   and published < cutoff]
        return [job_id for _, job_id in sorted(waiting)[:limit]]

    @hooked("queued_jobs_to_widen")
    def queued_jobs_to_widen(self, now: datetime, limit: int) -> list[str]:
        due = [(j.widen_at, j.job_id) for j in self._t.jobs.values()
               if j.status is JobStatus.QUEUED and j.widen_at is not None and j.widen_at <= now]
        return [job_id for _, job_id in sorted(due)[:limit]]

    @hooked("gangs_assembling_in")
    def gangs_assembling_in(self, cluster: str, regions: list[str], limit: int) -> list[str]:
        found = [(j.widen_at, j.job_id) for j in self._t.jobs.values()
                 if j.status is JobStatus.QUEUED and j.widen_at is not None and j.gang and j.cluster == cluster
                 and j.gang[0].region in regions]
        return [job_id for _, job_id in sorted(found)[:limit]]

    @hooked("queued_jobs_outranking")
    def queued_jobs_outranking(self, cluster: str, priority: int, vm: str, now: datetime, limit: int) -> list[Job]:
        found = [(-j.priority, j.queued_at, j.job_id) for j in self._t.jobs.values()
                 if j.status is JobStatus.QUEUED and j.cluster == cluster and j.priority > priority and j.nodes == 1
                 and not j.gang and (not j.start_vms or vm in j.start_vms or (j.widen_at is not None and j.widen_at <= now))]
        return [self._t.jobs[job_id] for _, _, job_id in sorted(found)[:limit]]

    @hooked("lock_job_unless_held")
    def lock_job_unless_held(self, job_id: str) -> Job | None:
        return self._t.jobs.get(job_id)  # (one thread at a time: no unit holds another's rows)

    @hooked("queued_jobs_uncleared")
    def queued_jobs_uncleared(self, cluster: str, carried: dict[str, list[str]], limit: int) -> list[str]:
        found = [(j.queued_at, j.job_id) for j in self._t.jobs.values()
                 if j.status is JobStatus.QUEUED and j.cluster == cluster and not j.gang
                 and (tags := j.request.get("requires_tags")) and any(not set(tags) <= set(carried.get(r, ()))
                                                                      for r in j.regions)]
        return [job_id for _, job_id in sorted(found)[:limit]]

    @hooked("queued_jobs_short")
    def queued_jobs_short(self, cluster: str, carried: dict[str, list[str]], limit: int) -> list[str]:
        found = [(j.queued_at, j.job_id) for j in self._t.jobs.values()
                 if j.status is JobStatus.QUEUED and j.cluster == cluster and not j.gang
                 and not isinstance(j.request.get("regions"), list)
                 and any(r not in j.regions and set(j.request.get("requires_tags") or ()) <= set(tags)
                         for r, tags in carried.items())]
        return [job_id for _, job_id in sorted(found)[:limit]]

    @hooked("queued_jobs_gpus_above")
    def queued_jobs_gpus_above(self, cluster: str, gpu_count: int, limit: int) -> list[str]:
        found = [(j.queued_at, j.job_id) for j in self._t.jobs.values()
                 if j.status is JobStatus.QUEUED and j.cluster == cluster and not j.gang
                 and (j.request.get("gpu_count") or j.gpus // max(j.nodes, 1)) > gpu_count]
        return [job_id for _, job_id in sorted(found)[:limit]]

    @hooked("queued_jobs_of_other_clusters")
    def queued_jobs_of_other_clusters(self, clusters: list[str], limit: int) -> list[str]:
        found = [(j.queued_at, j.job_id) for j in self._t.jobs.values()
                 if j.status is JobStatus.QUEUED and j.cluster not in clusters and not j.gang]
        return [job_id for _, job_id in sorted(found)[:limit]]

    @hooked("queued_jobs_unfit")
    def queued_jobs_unfit(self, cluster: str, models: list[str], flex_run_s: int, most_nodes: int, regions: list[str],
                          limit: int, flex_alone: bool = False) -> list[str]:
        def unfit(j: Job) -> bool:
            accepts, named = j.request.get("provisioning"), j.request.get("max_runtime_s")
            flex = accepts == "flex-start" or (flex_alone and accepts in (None, "any"))
            return (accepts in models or (flex and named is not None and named > flex_run_s)
                    or j.nodes > most_nodes or (isinstance(j.request.get("regions"), list)
                                                and not set(j.regions) & set(regions)))
        found = [(j.queued_at, j.job_id) for j in self._t.jobs.values()
                 if j.status is JobStatus.QUEUED and j.cluster == cluster and not j.gang and unfit(j)]
        return [job_id for _, job_id in sorted(found)[:limit]]

    @hooked("pending_jobs")
    def pending_jobs(self, limit: int, queue_less: bool = False) -> list[str]:
        return [j.job_id for j in sorted((j for j in self._t.jobs.values() if j.status is JobStatus.PENDING
                                          and j.hold is None and not (queue_less and j.queue)),
                                         key=lambda j: (j.submitted_at, j.job_id))][:limit]

    # -- early stops, the tick's clock ------------------------------------------------------
    @hooked("remember_early_stop")
    def remember_early_stop(self, job_id: str, reason: str, now: datetime, principal: str | None = None) -> None:
        self._t.early_stops.setdefault((job_id, principal or ""), (reason, now, principal))

    @hooked("take_early_stops")
    def take_early_stops(self, job_id: str) -> list[tuple[str, str | None]]:
        kept = [self._t.early_stops.pop(key) for key in [k for k in self._t.early_stops if k[0] == job_id]]
        return [(reason, sender) for reason, _, sender in sorted(kept, key=lambda k: k[1])]

    @hooked("kept_stop_names")
    def kept_stop_names(self, job_id: str) -> list[str]:
        names = {job_id, ((job := self._t.jobs.get(job_id)) and (job.request.get("array") or {}).get("id")) or job_id}
        return sorted(names & {key[0] for key in self._t.early_stops})

    @hooked("forget_early_stops")
    def forget_early_stops(self, cutoff: datetime) -> None:
        for key, (_, at, _) in list(self._t.early_stops.items()):
            if at < cutoff:
                del self._t.early_stops[key]

    @hooked("early_stops_of_submitted_jobs")
    def early_stops_of_submitted_jobs(self, limit: int) -> list[str]:
        first: dict[str, datetime] = {}
        for (job_id, _), (_, at, _) in self._t.early_stops.items():
            if job_id in self._t.jobs or self._tasks(job_id):
                first[job_id] = min(at, first.get(job_id, at))
        return [job_id for job_id, _ in sorted(first.items(), key=lambda item: (item[1], item[0]))[:limit]]

    @hooked("record_tick")
    def record_tick(self, now: datetime, gap_s: float) -> datetime | None:
        clock = self._t.tick_clock
        if clock is None:
            self._t.tick_clock = {"last_at": now, "back_at": None, "interval_s": None}
            return None
        elapsed = (now - clock["last_at"]).total_seconds()
        interval = clock["interval_s"]
        back_at = now if interval is not None and elapsed > max(gap_s, 1.5 * interval) else clock["back_at"]
        learnt = min(elapsed, 2 * interval) if interval is not None else elapsed  # a gap teaches twice at most
        self._t.tick_clock = {**clock, "last_at": now, "back_at": back_at,
                              "interval_s": max(learnt, 0.9 * (interval or 0))}
        return back_at

    @hooked("look_at_probe")
    def look_at_probe(self, now: datetime, late_s: float, stale_s: float, nonce: str) -> ProbeLook:
        clock = self._t.tick_clock
        assert clock is not None, "record_tick first"
        sent, heard, seen = clock.get("probe_sent_at"), clock.get("probe_heard_at"), bool(clock.get("probe_seen"))
        late = seen and sent is not None and heard is None and (now - sent).total_seconds() > late_s
        due = sent is None or heard is not None or (now - sent).total_seconds() > stale_s
        if due:
            if sent is not None and heard is None:  # replaced unheard: kept, it still vouches if it comes
                clock.update(probe_prev_nonce=clock.get("probe_nonce"), probe_prev_sent_at=sent)
            clock.update(probe_nonce=nonce, probe_sent_at=now, probe_heard_at=None)
        return ProbeLook(clock["back_at"], due, late, seen, sent, clock.get("probe_vouched_at"),
                         clock.get("delivery_lag_s"), clock.get("delivery_lag_at"))

    @hooked("probe_unsent")
    def probe_unsent(self, nonce: str) -> None:
        clock = self._t.tick_clock
        if clock is not None and clock.get("probe_nonce") == nonce and clock.get("probe_heard_at") is None:
            clock.update(probe_sent_at=None, probe_nonce=None)

    @hooked("probe_heard")
    def probe_heard(self, nonce: str, now: datetime) -> float | None:
        clock = self._t.tick_clock
        if clock is None:
            return None
        current = (clock.get("probe_nonce") == nonce and clock.get("probe_heard_at") is None
                   and clock.get("probe_sent_at") is not None)
        if not current and clock.get("probe_prev_nonce") != nonce:
            return None
        sent, vouched = clock["probe_sent_at"] if current else clock["probe_prev_sent_at"], clock.get("probe_vouched_at")
        clock["probe_vouched_at"] = sent if vouched is None or vouched > now else max(vouched, sent)  # stepped back
        if clock.get("probe_prev_nonce") is not None:  # the path stalled two timeouts: silences count afresh
            clock["back_at"] = now
        clock.update(probe_seen=True, probe_prev_nonce=None, probe_prev_sent_at=None,
                     **({"probe_heard_at": now} if current else {}))
        return (now - sent).total_seconds()

    @hooked("heard_late")
    def heard_late(self, lag_s: float, now: datetime, fresh_s: float) -> None:
        clock = self._t.tick_clock
        at, kept = (clock.get("delivery_lag_at"), clock.get("delivery_lag_s")) if clock is not None else (None, None)
        if clock is not None and (at is None or kept is None or kept < lag_s
                                  or abs((now - at).total_seconds()) > fresh_s):
            clock.update(delivery_lag_s=lag_s, delivery_lag_at=now)

    # -- outbox -----------------------------------------------------------------------------
    @hooked("add_outbox")
    def add_outbox(self, messages: Sequence[OutgoingMessage], now: datetime) -> list[int]:
        ids = []
        for message in messages:
            id_ = self._store.next_id()
            self._t.outbox[id_] = {"id": id_, "message": message, "created_at": now, "sent_at": None,
                                   "publish_attempts": 0, "last_error": None}
            ids.append(id_)
        return ids

    @hooked("unsent_outbox")
    def unsent_outbox(self, cutoff: datetime, limit: int) -> list[Enqueued]:
        rows = sorted((r for r in self._t.outbox.values()
                       if r["sent_at"] is None and (r["publish_attempts"] > 0 or r["created_at"] < cutoff)),
                      key=lambda r: (r["publish_attempts"], r["id"]))
        return [Enqueued(r["id"], r["message"]) for r in rows[:limit]]

    @hooked("mark_outbox_sent")
    def mark_outbox_sent(self, ids: list[int], now: datetime, *, durable: bool = True) -> None:
        for id_ in ids:
            if (row := self._t.outbox.get(id_)) is not None:
                self._t.outbox[id_] = {**row, "sent_at": now, "publish_attempts": row["publish_attempts"] + 1,
                                       "last_error": None}

    @hooked("mark_outbox_failed")
    def mark_outbox_failed(self, id_: int, error: str) -> None:
        if (row := self._t.outbox.get(id_)) is not None:
            self._t.outbox[id_] = {**row, "publish_attempts": row["publish_attempts"] + 1, "last_error": error[:1000]}

    @hooked("prune_outbox")
    def prune_outbox(self, cutoff: datetime, limit: int) -> int:
        gone = sorted((r["sent_at"], r["id"]) for r in self._t.outbox.values()
                      if r["sent_at"] is not None and r["sent_at"] < cutoff)[:limit]
        for _, id_ in gone:
            del self._t.outbox[id_]
        return len(gone)

    # -- admission --------------------------------------------------------------------------
    @hooked("queue_lock")
    def queue_lock(self, key: str) -> None:
        """Units of work never overlap here: nothing to wait for."""

    @hooked("admitted")
    def admitted(self, queue_names: list[str], cluster: str) -> list[dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for job in self._t.jobs.values():
            if job.queue in queue_names and job.cluster == cluster and job.status in HOLDS_QUOTA:
                row = out.setdefault(job.queue, {"queue": job.queue, "gpus": 0, "jobs": 0, "freeing": 0})
                row["gpus"] += job.gpus
                row["jobs"] += 1
                row["freeing"] += job.gpus if job.status is JobStatus.STOPPING and (
                    job.preempted_by or job.stop_reason is not None) else 0  # not a gang losing a node
        return list(out.values())

    @hooked("preemption_candidates")
    def preemption_candidates(self, queue_names: list[str], cluster: str, limit: int) -> list[Job]:
        candidates = [j for j in self._t.jobs.values()
                      if j.queue in queue_names and j.cluster == cluster and j.preempted_by is None
                      and j.status in (JobStatus.QUEUED, JobStatus.ASSIGNED, JobStatus.RUNNING)]
        candidates.sort(key=lambda j: j.job_id, reverse=True)
        candidates.sort(key=lambda j: j.queued_at or datetime.max.replace(tzinfo=j.submitted_at.tzinfo), reverse=True)
        candidates.sort(key=lambda j: j.priority)
        taken: dict[str | None, int] = {}  # the first ``limit`` of each queue
        out = []
        for job in candidates:
            taken[job.queue] = taken.get(job.queue, 0) + 1
            if taken[job.queue] <= limit:
                out.append(job)
        return out

    # -- arrays ----------------------------------------------------------------------------------
    def _tasks(self, array_id: str) -> list[Job]:
        return sorted((j for j in self._t.jobs.values() if (j.request.get("array") or {}).get("id") == array_id
                       and "index" in j.request["array"]), key=lambda j: j.request["array"]["index"])

    @hooked("array_let_go")
    def array_let_go(self, array_id: str) -> int:
        return self._let_go(array_id)

    def _let_go(self, array_id: str) -> int:
        return sum(1 for j in self._tasks(array_id) if (j.hold is None or j.hold_until is not None)
                   and not j.status.terminal)

    @hooked("array_next_held")
    def array_next_held(self, array_id: str) -> Job | None:
        return next((j for j in self._tasks(array_id)
                     if j.status is JobStatus.PENDING and (j.hold or "").startswith(arrays.HOLD_PREFIX)), None)

    @hooked("arrays_holding")
    def arrays_holding(self, limit: int) -> list[str]:
        held = {j.request["array"]["id"]: int(j.request["array"].get("max_parallel") or 0) for j in self._t.jobs.values()
                if j.status is JobStatus.PENDING and (j.hold or "").startswith(arrays.HOLD_PREFIX)
                and (j.request.get("array") or {}).get("id")}
        return sorted(name for name, most in held.items() if self._let_go(name) < most)[:limit]

    @hooked("array_tasks")
    def array_tasks(self, array_id: str) -> list[Job]:
        return self._tasks(array_id)

    @hooked("array_end")
    def array_end(self, array_id: str) -> tuple[int, int, str | None]:
        tasks = self._tasks(array_id)
        return (len(tasks), sum(not t.status.terminal for t in tasks),
                next((t.status.value for t in tasks if t.status is not JobStatus.SUCCEEDED), None))

    @hooked("arrays_named")
    def arrays_named(self, names: list[str]) -> list[str]:
        wanted = set(names)
        return sorted({j.request["array"]["id"] for j in self._t.jobs.values()
                       if (j.request.get("array") or {}).get("id") in wanted})

    def lock_job_ids(self, job_ids: list[str]) -> None:
        """Nothing to wait for: the store runs one unit of work at a time."""

    @hooked("waiting_after")
    def waiting_after(self, names: list[str]) -> list[Job]:
        return sorted((j for j in self._t.jobs.values() if j.status is JobStatus.PENDING
                       and dependencies.is_after_hold(j.hold) and set(j.request.get("after") or ()) & set(names)),
                      key=lambda j: (j.submitted_at, j.job_id))

    @hooked("held_after")
    def held_after(self, limit: int) -> list[str]:
        def ends(names: list[str]) -> dict[str, str | None]:  # as DecisionWriter._ends
            out: dict[str, str | None] = {}
            for name in names:
                tasks = [self._t.jobs[name]] if name in self._t.jobs else self._tasks(name)
                out[name] = ("gone" if not tasks else None if any(not t.status.terminal for t in tasks) else
                             next((t.status.value for t in tasks if t.status is not JobStatus.SUCCEEDED), "SUCCEEDED"))
            return out
        held = [j for j in self._t.jobs.values() if j.status is JobStatus.PENDING and dependencies.is_after_hold(j.hold)
                and dependencies.verdict(j.request.get("after_condition") or "ok",
                                         ends(list(j.request.get("after") or [])))[0] != "wait"]
        return [j.job_id for j in sorted(held, key=lambda j: (j.submitted_at, j.job_id))][:limit]

    @hooked("retry_due")
    def retry_due(self, now: datetime, limit: int, kind: str, of_kind: bool) -> list[str]:
        due = [j for j in self._t.jobs.values()
               if j.status is JobStatus.PENDING and j.hold_until is not None and j.hold_until <= now
               and (j.hold or "").startswith(kind) == of_kind]
        return [j.job_id for j in sorted(due, key=lambda j: (j.hold_until, j.job_id))][:limit]

    @hooked("pending_of_queue")
    def pending_of_queue(self, queue: str, cluster: str, limit: int, most: int) -> list[Job]:
        line = [j for j in self._t.jobs.values() if j.queue == queue and j.cluster == cluster
                and j.status is JobStatus.PENDING and j.hold is None and j.gpus <= most]
        return sorted(line, key=_admission_order)[:limit]

    @hooked("waiting_queues")
    def waiting_queues(self) -> list[tuple[str, str]]:
        return sorted({(j.queue, j.cluster) for j in self._t.jobs.values()
                       if j.status is JobStatus.PENDING and j.hold is None and j.queue is not None})

    @hooked("queue_head")
    def queue_head(self, queue: str, cluster: str, most: int) -> tuple[str, int] | None:
        line = [j for j in self._t.jobs.values() if j.queue == queue and j.cluster == cluster
                and j.status is JobStatus.PENDING and j.hold is None and j.gpus <= most]
        return next(((j.job_id, j.gpus) for j in sorted(line, key=_admission_order)), None)

    @hooked("jobs_ahead")
    def jobs_ahead(self, job: Job, most: int) -> int:
        return sum(1 for j in self._t.jobs.values() if j.queue is not None and j.queue == job.queue
                   and j.cluster == job.cluster and j.status is JobStatus.PENDING and j.hold is None and j.gpus <= most
                   and _admission_order(j) < _admission_order(job))

    @hooked("queue_usage")
    def queue_usage(self, queue_names: list[str]) -> dict[tuple[str, str], tuple[float, datetime]]:
        return {key: value for key, value in self._t.queue_usage.items() if key[0] in queue_names}

    @hooked("save_queue_usage")
    def save_queue_usage(self, queue: str, cluster: str, gpu_seconds: float, now: datetime) -> None:
        self._t.queue_usage[(queue, cluster)] = (gpu_seconds, now)

    @hooked("queue_counts")
    def queue_counts(self) -> list[dict[str, Any]]:
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for j in self._t.jobs.values():
            if j.queue is None or not (j.status is JobStatus.PENDING or j.status in HOLDS_QUOTA):
                continue
            row = out.setdefault((j.queue, j.cluster), {"queue": j.queue, "cluster": j.cluster, "pending": 0,
                                                        "admitted_waiting": 0, "running": 0, "admitted_gpus": 0})
            row["pending"] += j.status is JobStatus.PENDING
            row["admitted_waiting"] += j.status in (JobStatus.QUEUED, JobStatus.ASSIGNED, JobStatus.LOST)
            row["running"] += j.status in (JobStatus.RUNNING, JobStatus.STOPPING)
            row["admitted_gpus"] += j.gpus if j.status in HOLDS_QUOTA else 0
        return [out[key] for key in sorted(out)]

    # -- usage ------------------------------------------------------------------------------
    @hooked("record_attempt")
    def record_attempt(self, job: Job, *, outcome: str, machine_type: str | None, gpus: int,
                       ran_from: datetime | None, now: datetime, vm_share: float = 1.0,
                       price: AttemptPrice | None = None, gpu_factor: float = 1.0) -> bool:
        key = (job.job_id, job.attempt)
        if key in self._t.attempt_usage:
            return False
        claims = [e["at"] for e in self._t.events if e["job_id"] == job.job_id and e["attempt"] == job.attempt
                  and e["to_status"] == JobStatus.ASSIGNED.value]
        started = min(max(claims) if claims else ran_from or now, now)
        self._t.attempt_usage[key] = {
            "job_id": job.job_id, "attempt": job.attempt, "user_id": job.user_id, "queue": job.queue,
            "cluster": job.cluster, "machine_type": machine_type, "region": job.region, "vm": job.vm, "gpus": gpus,
            "started_at": started, "ended_at": now, "outcome": outcome, "vm_share": vm_share,
            "gpu_seconds": gpus * gpu_factor * max(0.0, (now - started).total_seconds()),
            "model": price.model if price else None, "usd_per_hour": _usd_per_hour(price)}
        return True

    @hooked("lost_attempt")
    def lost_attempt(self, job_id: str, attempt: int) -> dict[str, Any] | None:
        row = self._t.attempt_usage.get((job_id, attempt))
        if row is None or row["outcome"] not in (JobStatus.LOST.value, "PREEMPTED"):
            return None
        gave_up = JobStatus.LOST.value if row["outcome"] == JobStatus.LOST.value else JobStatus.PENDING.value
        return {"vm": row["vm"], "started_at": row["started_at"], "outcome": row["outcome"],
                "by_sweep": any(e["job_id"] == job_id and e["attempt"] == attempt and e["actor"] == "sweep"
                                and e["to_status"] == gave_up for e in self._t.events),
                "later_held": any(j == job_id and a > attempt for j, a in self._t.attempt_usage),
                "unspent": any(e["job_id"] == job_id and e["attempt"] == attempt and e["actor"] == "sweep"
                               and e["to_status"] == JobStatus.LOST.value and UNSPENT in e["reason"]
                               for e in self._t.events)}

    @hooked("record_late_outcome")
    def record_late_outcome(self, job_id: str, attempt: int, outcome: str) -> bool:
        row = self._t.attempt_usage.get((job_id, attempt))
        if row is None or row["outcome"] not in (JobStatus.LOST.value, "PREEMPTED"):
            return False
        self._t.attempt_usage[(job_id, attempt)] = {**row, "outcome": outcome}
        return True

    # -- rejections -------------------------------------------------------------------------
    @hooked("record_rejection")
    def record_rejection(self, *, source: str, message_id: str, job_id: str | None, reason: str,
                         payload: bytes, now: datetime, key: str | None = None, principal: str | None = None,
                         named_job_id: str | None = None) -> bool:
        rows = self._t.rejections
        for n, row in enumerate(rows):
            if key is not None and row["source"] == source and row["repeat_key"] == key:
                rows[n] = {**row, "count": row["count"] + 1, "last_at": max(row["last_at"] or row["at"], now)}
                return False
        if any(row["source"] == source and row["message_id"] == message_id for row in rows):
            return False
        rows.append({"id": self._store.next_id(), "at": now, "source": source, "message_id": message_id,
                     "job_id": job_id, "reason": reason, "repeat_key": key, "count": 1, "last_at": None,
                     "principal": principal, "named_job_id": named_job_id,
                     "payload": escape_unstorable(payload[:4096].decode("utf-8", errors="replace"), 8192)})
        return True

    @hooked("rejection_last_seen")
    def rejection_last_seen(self, source: str, key: str) -> datetime | None:
        seen = [row["last_at"] or row["at"] for row in self._t.rejections
                if row["source"] == source and row["repeat_key"] == key]
        return seen[0] if seen else None

    # -- fleet ------------------------------------------------------------------------------
    @hooked("blocked_regions")
    def blocked_regions(self, cluster: str, now: datetime, since: datetime | None = None) -> set[str]:
        recent = {region for (c, region), at in self._t.stocked_out.items()
                  if c == cluster and since is not None and at > since}
        return recent | {region for (c, region), until in self._t.blocked.items() if c == cluster and until > now}

    @hooked("gang_rooms")
    def gang_rooms(self, cluster: str) -> dict[str, tuple[int, datetime | None]]:
        flying: dict[str, int] = {}  # region -> its VMs that are gangs' nodes in flight (gang_node_in_flight)
        for vm in self._t.vms.values():
            job = self._t.jobs.get(vm["job_id"] or "")
            if vm["cluster"] == cluster and vm["state"] == "BUSY" and job is not None and self._in_flight(vm, job):
                flying[vm["region"]] = flying.get(vm["region"], 0) + 1
        return {pool: (room + flying.get(pool.split("/")[0], 0), at)
                for (c, pool), (room, at) in self._t.gang_rooms.items() if c == cluster}

    def _in_flight(self, vm: dict[str, Any], job: Job) -> bool:
        """Migration 0057's ``gang_node_in_flight``: ``vm``'s agent said BUSY with ``job``'s attempt, an assembling
        gang's, where its claim may be taken, not yet a node of it, and not drained."""
        nodes = job.gang or []
        return (job.status is JobStatus.QUEUED and job.nodes > 1 and vm["cluster"] == job.cluster
                and vm["attempt"] == job.attempt and all(node.vm != vm["name"] for node in nodes)
                and vm["region"] == (nodes[0].region if nodes else vm["region"]) and vm["region"] in job.regions
                and vm["name"] not in self._t.drained)

    @hooked("vms_holding")
    def vms_holding(self, cluster: str, regions: list[str], inputs: list[str], image: str | None,
                    now: datetime, limit: int = 20) -> list[tuple[str, str, bool, str | None]]:
        seen_after = now - timedelta(seconds=WARM_VM_SEEN_S)
        held = {j.vm for j in self._t.jobs.values() if j.status in HELD}
        offered = {vm for j in self._t.jobs.values() if j.cluster == cluster and j.status is JobStatus.QUEUED
                   for vm in j.start_vms or ()}
        warm = [vm for vm in self._t.vms.values()
                if vm["cluster"] == cluster and vm["state"] == "IDLE" and vm["last_seen_at"] > seen_after
                and vm["region"] in regions and vm["name"] not in held and vm["name"] not in self._t.drained
                and ((inputs and set(inputs) <= set(vm["cached_inputs"] or ()))
                     or (image is not None and image in (vm["images"] or ())))]
        warm.sort(key=lambda vm: vm["name"])
        warm.sort(key=lambda vm: vm["last_seen_at"], reverse=True)
        warm.sort(key=lambda vm: vm["name"] in offered)
        # no scaling pass records instances here (vm_model): no recorded model, the VM's name tells
        return [(vm["name"], vm["region"], vm["name"] in offered, None) for vm in warm[:limit]]

    @hooked("upsert_vm")
    def upsert_vm(self, *, name: str, cluster: str, region: str, zone: str, state: str, job_id: str | None,
                  attempt: int | None, seq: int, sent_at: datetime, now: datetime,
                  jobs: list[dict[str, Any]] | None = None, cached_inputs: list[str] | None = None,
                  images: list[str] | None = None, heard_at: datetime | None = None,
                  created: datetime | None = None) -> str | None:
        if state not in VM_STATES:  # Postgres's check constraint
            raise DataRejected(f"the database refused the data (23514): VM state {state!r}")
        before = self._t.vms.get(name)
        retired_as = (before or {}).get("retired_created_at")
        if created is not None and retired_as == created:  # that VM's later words: RETIRED still (upsert_vm)
            state = "RETIRED"
        if state == "RETIRED" and created is not None:  # kept, older or not (upsert_vm, vm_retired_as)
            retired_as = created
            if before is not None:
                before["retired_created_at"] = created
        if before is not None and before["last_seq"] >= seq:
            if heard_at is not None:  # an older seq, sent now: the VM was heard (upsert_vm, vm_heard)
                before["last_seen_at"] = max(before["last_seen_at"], heard_at)
            return None
        kept = (before or {}).get("idle_since")  # an agent's STOPPING keeps it, but for a recreated VM (upsert_vm)
        if before is not None and before["state"] == "STOPPING" and (now - before["last_seen_at"]).total_seconds() > 60:
            kept = None
        if before is not None and before["state"] != "IDLE":  # idle anew: not before Zen last heard it otherwise
            sent_at = max(sent_at, before["last_seen_at"])
        idle_since = (kept or sent_at) if state == "IDLE" else kept if state == "STOPPING" else None
        self._t.vms[name] = {
            "name": name, "cluster": cluster, "region": region, "zone": zone, "state": state, "job_id": job_id,
            "attempt": attempt, "jobs": jobs, "last_seq": seq, "last_seen_at": now, "idle_since": idle_since,
            "first_seen_at": before["first_seen_at"] if before else now, "cached_inputs": cached_inputs,
            "images": images, "retired_created_at": retired_as}
        return before["state"] if before else ""

    @hooked("vm_is_draining")
    def vm_is_draining(self, vm: str, seq: int) -> bool:
        row = self._t.vms.get(vm, {})
        return vm in self._t.drained or row.get("state") == "RETIRED" and row["last_seq"] > seq

    @hooked("vm_retired_before")
    def vm_retired_before(self, vm: str, created: datetime | None) -> bool:
        return created is not None and self._t.vms.get(vm, {}).get("retired_created_at") == created

    @hooked("jobs_on_vm")
    def jobs_on_vm(self, vm: str) -> dict[str, int]:
        return {j.job_id: j.gpus for j in self._t.jobs.values() if j.vm == vm and j.status in HELD}

    @hooked("vm_model")
    def vm_model(self, vm: str, ran_from: datetime | None = None) -> str | None:
        return None  # no scaling pass records instances here: the VM's name tells its model

    @hooked("vm_run_marks")
    def vm_run_marks(self, vm: str) -> tuple[datetime | None, datetime | None]:
        return self._t.vms.get(vm, {}).get("first_seen_at"), None  # no scaling pass records instances here

    @hooked("vm_stop_seen")
    def vm_stop_seen(self, vm: str, since: datetime) -> tuple[str | None, datetime | None, bool] | None:
        return None  # no scaling pass records instances here

    @hooked("vm_outside_mig")
    def vm_outside_mig(self, vm: str, sent_before: datetime) -> tuple[datetime, float | None] | None:
        return None  # no scaling pass records instances here

    @hooked("vm_shares")
    def vm_shares(self, vm: str) -> bool | None:
        row = self._t.vms.get(vm)
        return None if row is None else row.get("jobs") is not None

    @hooked("drain_unless_busy")
    def drain_unless_busy(self, vm: str, cluster: str, region: str, now: datetime) -> bool:
        if self.jobs_on_vm(vm) or any(n.vm == vm for j in self._t.jobs.values() if j.gang and j.status in (
                JobStatus.QUEUED, *HELD) for n in j.gang):
            return False
        self._t.drained = self._t.drained | {vm}
        return True


def fresh(job: Job, *, status: JobStatus, at: datetime, queued: bool = False) -> Job:
    """A job row as an insert writes it (insert_job / submit_jobs: only the request's fields kept)."""
    return job.model_copy(update={
        "status": status, "attempt": 1, "last_seq": 0, "submitted_at": at, "updated_at": at, "region": None,
        "zone": None, "vm": None, "last_heartbeat_at": None, "started_at": None, "finished_at": None,
        "exit_code": None, "message": None, "preempted_by": None, "stop_reason": None, "preemptions": 0,
        "hold_until": None, "retries": 0, "budget": job.max_attempts,
        "queued_at": at if queued else None, "start_published_at": at if queued else None,
        "queue": None if queued else job.queue,
        **({} if queued else {"start_regions": None, "widen_at": None, "start_vms": None})})


def _admission_order(job: Job) -> tuple[int, datetime, str]:
    return (-job.priority, job.submitted_at, job.job_id)


def _value(status: Any) -> Any:
    return status.value if isinstance(status, JobStatus) else status


def _usd_per_hour(price: AttemptPrice | None) -> float | None:
    """An attempt's price here: no fleet or catalog rows, so each VM as its name says, at an override, else the
    snapshot's (the Postgres statement: zen.store.queries insert_attempt_usage)."""
    if price is None:
        return None
    usd = [(share, price.fixed.get(model, price.fallback.get(model))) for _, model, share in price.vms]
    return None if any(p is None for _, p in usd) else sum(share * p for share, p in usd if p is not None)
