"""Kueue-style queues with GPU quotas: which PENDING jobs may be admitted (QUEUED) now, and why not.

One admission pass per cohort and cluster, serialised by advisory locks: what fits a queue's nominal
quota, what it may borrow in its cohort, the order (lent quota back first, priority, dominant share,
age), and the victims of a preemption (``Queueing._victims``). Without ``queues:`` every job is admitted
at once. The rules and their reasons: docs/how-to/queues.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Mapping

from zen.core.clock import utc_now
from zen.core.config import QueueConfig, ZenConfig
from zen.core.errors import Rejected
from zen.core.models import Job
from zen.jobs.lending import admission_reason, borrowed, bound

if TYPE_CHECKING:
    from zen.jobs.store import AdmissionRows

PASS_LIMIT = 200  # waiting jobs read per queue per pass; a later pass takes the next ones


@dataclass
class Pass:
    """What one admission pass decided: jobs to admit and jobs to preempt, each with its reason."""

    admitted: list[tuple[Job, str]] = field(default_factory=list)
    preempted: list[tuple[Job, str]] = field(default_factory=list)


@dataclass
class QueueState:
    """One queue in an admission pass: its quota on the pass's cluster, what it holds, its waiting
    jobs in order (anything with ``priority``, ``submitted_at``, ``job_id`` and ``gpus``)."""

    config: QueueConfig
    nominal: int
    limit: float  # nominal + what it may borrow
    used: int
    usage_gpus: float  # decayed GPU-seconds / half-life: "recent usage" in GPUs
    waiting: list[Job]
    freeing: int = 0  # of ``used``, held by jobs being stopped (a preemption's victims, a user's stop)

    @classmethod
    def of(cls, config: QueueConfig, cluster: str, used: int, usage_gpus: float, waiting: list[Job],
           freeing: int = 0) -> "QueueState":
        return cls(config, config.quota[cluster], config.limit(cluster), used, usage_gpus, waiting, freeing)

    def borrows_for(self, job: Job) -> bool:
        """Whether admitting ``job`` takes the queue beyond its nominal quota (borrowing)."""
        return self.used + job.gpus > self.nominal

    @property
    def share(self) -> float:
        return (self.usage_gpus + self.used) / max(self.nominal, 1)


def order_admissions(state: list[QueueState], cohort_used: int, cohort_quota: int,
                     blocked: Callable[[QueueState, Any, int], int] | None = None, lender_held: bool = False
                     ) -> list[tuple[QueueState, Any, int]]:
    """The pure core of a pass (production and the simulator share it): admit heads while they fit,
    heads within their queue's nominal quota before heads that would borrow, then highest priority, then lowest
    share, then oldest; a head that does not fit stops its queue (``blocked(queue, head, cohort_used)`` is told,
    and returns the GPUs of the victims it preempts for it, now being freed). Once a head within its queue's
    nominal quota is blocked by the cohort (its quota is lent), nobody borrows in this pass: what comes free goes back
    to the lender, else borrowers' small jobs would take each 2 GPUs freed before a lender's 4-GPU job
    ever fits (and undo a reclaim). Likewise a head that will fit once the GPUs being freed are back
    (``QueueState.freeing``: jobs stopping, a preemption's victims) is what they are freed for: what it
    needs beyond them is kept for it out of the free GPUs, so no head after it takes that and leaves it
    short again (a second victim stopped for the same head). ``lender_held``: a head within its queue's
    nominal quota is held by another change at this moment (its stop, a late report), unread: nobody
    borrows either. Returns (queue, job, GPUs the queue holds with it); updates each queue's ``used``."""
    admitted = []
    active = [q for q in state if q.waiting]
    lent_back = lender_held  # a head within its nominal quota waits for its lent quota
    coming = sum(q.freeing for q in state)  # being freed, not yet kept for a head
    while active:
        best = min(active, key=lambda q: (q.borrows_for(q.waiting[0]), -q.waiting[0].priority, q.share,
                                          q.waiting[0].submitted_at, q.waiting[0].job_id))
        job = best.waiting[0]
        if lent_back and best.borrows_for(job):
            break  # every head left would borrow (they sort after those that would not)
        if best.used + job.gpus > best.limit or cohort_used + job.gpus > cohort_quota:
            lent_back = lent_back or not best.borrows_for(job)
            active.remove(best)  # its head does not fit: the queue waits, the others go on
            if blocked is not None:
                coming += blocked(best, job, cohort_used)
            if coming and best.used - best.freeing + job.gpus <= best.limit and \
                    cohort_used - coming + job.gpus <= cohort_quota:  # it fits once they are back: its part kept
                from_coming = min(coming, job.gpus)
                coming -= from_coming
                cohort_used += job.gpus - from_coming
            continue
        best.waiting.pop(0)
        best.used += job.gpus
        cohort_used += job.gpus
        admitted.append((best, job, best.used))
        if not best.waiting:
            active.remove(best)
    return admitted


def _admitted_once_gone(state: list[QueueState], job: Job, victims: list[tuple[Job, str]], cohort_used: int,
                        cohort_quota: int, lines: Mapping[str, list[Job]]) -> bool:
    """Whether the next pass, with ``victims`` gone, admits ``job``: what they free goes to the first heads
    in order that fit it, by the shares and priorities that pass will see (a head ahead of ``job`` then
    would take it, and they would have been stopped for nothing while ``job`` still waited). ``lines``: each
    queue's waiting jobs as that pass reads them (more than this one did, with more room), those this pass
    admitted left out."""
    freed: dict[str | None, int] = {}
    for victim, _ in victims:
        freed[victim.queue] = freed.get(victim.queue, 0) + victim.gpus
    after = [replace(q, used=q.used - freed.get(q.config.name, 0), waiting=list(lines[q.config.name]), freeing=0)
             for q in state]
    return any(admitted.job_id == job.job_id for _, admitted, _ in order_admissions(
        after, cohort_used - sum(freed.values()), cohort_quota))


def decay(gpu_seconds: float, elapsed_s: float, held_gpus: int, half_life_s: float) -> float:
    """A queue's usage brought forward by ``elapsed_s``: decayed, plus what it held meanwhile, each second of
    it decayed from when it was held (the integral), so one step over an hour and sixty steps of a minute give
    the same figure: passes run only when a cohort has something to admit (added at full weight, 4 GPUs held
    10 h while none ran weighed 40 GPU-hours, the most a one-hour half-life allows any hold being 5.8)."""
    kept: float = 0.5 ** (elapsed_s / half_life_s)  # (float ** float is Any to mypy)
    return gpu_seconds * kept + held_gpus * half_life_s / math.log(2) * (1 - kept)


class Queueing:
    def __init__(self, config: ZenConfig):
        self._config = config
        self._half_life = config.queueing.usage_half_life_s

    # -- at submission -------------------------------------------------------------------------
    def resolve(self, requested: str | None, user: str, cluster: str, gpus: int) -> QueueConfig:
        """The queue a new job belongs to, or ``Rejected`` with the reason."""
        config = self._config
        if requested is not None:
            queue = config.queue(requested)
            if queue is None:
                raise Rejected(f"unknown queue {requested!r}; queues: {', '.join(q.name for q in config.queues)}")
        else:
            queue = config.default_queue(user)
            if queue is None:
                raise Rejected(f"no queue for user {user!r}: give a queue (zen submit --queue, or queue: in the job; one of "
                               f"{', '.join(q.name for q in config.queues)}) or configure a queue named default")
        if cluster not in queue.quota:
            raise Rejected(f"queue {queue.name} has no quota for cluster {cluster} "
                           f"(its clusters: {', '.join(queue.quota)})")
        most = self._most_ever(queue, cluster)
        if gpus > most:
            raise Rejected(f"the job needs {gpus} GPUs of {cluster} but queue {queue.name} can never hold more "
                           f"than {most}")
        return queue

    def _most_ever(self, queue: QueueConfig, cluster: str) -> float:
        return min(queue.limit(cluster), sum(q.quota.get(cluster, 0) for q in self._config.cohort_of(queue)))

    # -- the admission pass --------------------------------------------------------------------
    def lock(self, tx: AdmissionRows, passes: list[tuple[str, str]]) -> None:
        """Hold the locks of the passes over these (queue, cluster) until the transaction ends, in name order: each member
        queue's, not the cohort's (a queue moved to another cohort by a deploy: two instances' passes filled one quota)."""
        known = [(queue, cluster) for name, cluster in passes if (queue := self._config.queue(name)) and cluster in queue.quota]
        for name in sorted({member.name for queue, cluster in known for member in self._config.cohort_of(queue, cluster)}):
            tx.queue_lock(f"queue:{name}")

    def admit(self, tx: AdmissionRows, queue_name: str, cluster: str, now: datetime, released: int = 0) -> Pass:
        """One pass for the cohort of ``queue_name`` on ``cluster``, under its member queues' locks (``lock``): the jobs to
        admit now and the jobs to preempt (locked rows, in order) with the reasons to record, which the caller applies.
        ``released``: GPUs of ``queue_name`` a job gave back in this transaction (the change running this pass)."""
        queue = self._config.queue(queue_name)
        if queue is None or cluster not in queue.quota:  # gone, or no quota here: its jobs wait (why_pending)
            return Pass()
        members = self._config.cohort_of(queue, cluster)
        names = [q.name for q in members]
        self.lock(tx, [(queue_name, cluster)])
        held = tx.admitted(names, cluster)
        used = {r["queue"]: r["gpus"] for r in held}
        freeing = sum(r["freeing"] for r in held)  # jobs stopping (a preemption or a user's stop): wait for them
        cohort_quota = sum(q.quota[cluster] for q in members)
        cohort_used = sum(used.values())
        shape = self._config.cluster(cluster)
        gpus = shape.gpus_held(1) if shape else 1  # the fewest GPUs one of its jobs submitted now holds
        # Jobs that could still fit: read no more. Where none of that size does, or a job read holds fewer (waiting since
        # before max_jobs_per_vm was lowered: below), one per free GPU.
        room = (free := cohort_quota - cohort_used) // max(gpus, 1) or max(free, 0)
        full = room <= 0 and (freeing or all(q.preemption == "never" for q in members))  # no job read: a flood is free
        held_until_now = {**used, queue_name: used.get(queue_name, 0) + released}
        usage = self._bring_usage_up_to_date(tx, names, cluster, held_until_now, now) if released or not full else {}
        if full:  # a release is counted all the same (above): a step in what its queue held, over a lowered quota too
            return Pass()
        state = []
        # room jobs could fit; one more shows each head that does not: one a preemption may serve, and, where
        # any member may preempt, a lender's (no head borrows, so none preempts to borrow, while it waits)
        more = not freeing and any(q.preemption != "never" for q in members)
        stopping = {r["queue"]: r["freeing"] for r in held}

        def line(q: QueueConfig, fits: int, admitted: int = 0) -> list[Job]:  # its first waiting jobs, when ``fits``
            most, rows = int(self._most_ever(q, cluster)), max(0, min(fits, PASS_LIMIT)) + more + admitted  # may be
            return tx.pending_of_queue(q.name, cluster, rows, most)[admitted:]  # admitted, behind those this pass took

        for q in members:
            state.append(QueueState.of(q, cluster, used.get(q.name, 0), usage.get(q.name, 0.0), line(q, room),
                                       stopping.get(q.name, 0)))
        if any(job.gpus < gpus for q in state for job in q.waiting):  # waiting since before max_jobs_per_vm was lowered:
            gpus, room = 1, max(free, 0)  # read again, one per free GPU (one per VM's worth left GPUs idle until a tick)
            for member in state:
                member.waiting = line(member.config, room)
        read = {q.config.name: len(q.waiting) for q in state}
        result = Pass()

        def blocked(queue: QueueState, job: Job, cohort_used_now: int) -> int:
            if freeing or result.preempted or queue.config.preemption == "never":
                return 0
            victims = self._victims(tx, queue, job, state, cohort_used_now, cohort_quota)
            freed = sum(v.gpus for v, _ in victims)
            # The next pass reads each line as ``room`` then, past those admitted here (still PENDING): unread go first.
            fits = (then := cohort_quota - cohort_used_now + freed) // max(gpus, 1) or max(then, 0)
            lines = {q.config.name: line(q.config, fits, read[q.config.name] - len(q.waiting)) for q in state if victims}
            if not victims or not _admitted_once_gone(state, job, victims, cohort_used_now, cohort_quota, lines):
                return 0
            result.preempted = victims
            for q in state:
                q.freeing += sum(v.gpus for v, _ in victims if v.queue == q.config.name)
            return freed

        # A line cut at its head by a lock (its stop being applied) reads empty: a head within that queue's
        # nominal quota may be waiting there, and a borrower took what was its (the serial orders: it waits).
        lender_held = any(q.used < q.nominal and not q.waiting and (head := tx.queue_head(
            q.config.name, cluster, int(self._most_ever(q.config, cluster)))) is not None and
            q.used + head[1] <= q.nominal for q in state) if any(q.waiting for q in state) else False
        for admitting, job, gpus_held in order_admissions(state, cohort_used, cohort_quota, blocked, lender_held):
            result.admitted.append((job, admission_reason(admitting.config.name, admitting.nominal, gpus_held, cluster)))
        return result

    def _victims(self, tx: AdmissionRows, queue: QueueState, job: Job, state: list[QueueState], cohort_used: int,
                 cohort_quota: int) -> list[tuple[Job, str]]:
        """Admitted jobs whose quota ``job`` may take back under its queue's ``preemption`` rule, or []
        when they would not free enough (never preempt for nothing):
        - ``reclaim-borrowed``: the job fits its queue's nominal quota; victims are jobs of other queues
          of the cohort while those are beyond their own nominal quota (borrowing), cheapest first, as Kueue
          takes them (a job larger than what its queue borrowed, a gang, included);
        - ``lower-priority``: victims are jobs of its own queue of lower priority, cheapest first.
        Cheapest: lowest priority, then the most recently admitted (Kueue's order). Then, as Kueue does, each
        victim but the last, from the last back, is spared where the others free enough without it (a small
        job taken before a large one that freed enough alone was stopped, and rerun, for nothing)."""
        name, takes = queue.config.name, {"reclaim-borrowed": "takes back the quota its queue lent"}.get(
            queue.config.preemption, "takes the quota of lower-priority jobs of its queue")
        if queue.config.preemption == "reclaim-borrowed":
            if queue.used + job.gpus > queue.nominal:
                return []
            need: float = cohort_used + job.gpus - cohort_quota
            lent: dict[str, float] = {q.config.name: q.used - q.nominal for q in state
                                      if q is not queue and q.used > q.nominal}
            candidates = tx.preemption_candidates(list(lent), job.cluster, 50) if lent else []
        else:
            need = max(queue.used + job.gpus - queue.limit, cohort_used + job.gpus - cohort_quota)
            lent = {name: math.inf}
            candidates = [c for c in tx.preemption_candidates([name], job.cluster, 50)
                          if c.priority < job.priority]
        victims = []
        for candidate in candidates:
            if need <= 0:
                break
            if candidate.queue is not None and lent[candidate.queue] > 0:  # its queue still above its nominal
                lent[candidate.queue] -= candidate.gpus
                need -= candidate.gpus
                # The preemptor by its queue and size, not its id: the victim's people may not see it (console.md).
                victims.append((candidate, f"a {job.gpus}-GPU job of queue {name} (priority {job.priority}) {takes}"))
        if need > 0:
            return []
        for victim in reversed(victims[:-1]):
            if need + victim[0].gpus <= 0:
                victims.remove(victim)
                need += victim[0].gpus
        return victims

    def _bring_usage_up_to_date(self, tx: AdmissionRows, names: list[str], cluster: str, used: dict[str, int],
                                now: datetime) -> dict[str, float]:
        """Decay each queue's GPU-seconds to ``now``, add what it held since; returns usage in GPUs."""
        known = tx.queue_usage(names)
        out = {}
        for name in names:
            seconds, since = known.get((name, cluster), (0.0, now))
            seconds = decay(seconds, max(0.0, (now - since).total_seconds()), used.get(name, 0), self._half_life)
            tx.save_queue_usage(name, cluster, seconds, now)
            out[name] = seconds / self._half_life
        return out

    # -- explanations --------------------------------------------------------------------------
    def why_pending(self, tx: AdmissionRows, job: Job) -> str:
        """Why a PENDING job waits: its queue's quota, what it may borrow, jobs ahead of it. A job whose
        queue left the configuration, or no longer has quota for the job's cluster, is never admitted
        by another queue's quota (that would bypass what the operator configured, as Kueue leaves
        such a workload inadmissible): it waits until the quota is back, or its user stops it and
        submits it again."""
        queue = self._config.queue(job.queue) if job.queue else None
        if queue is None:
            return f"queue {job.queue!r} is not in the configuration: the job waits until it is back"
        if job.cluster not in queue.quota:
            return (f"queue {queue.name} has no quota for cluster {job.cluster} (its clusters: "
                    f"{', '.join(queue.quota) or 'none'}): the job waits until it has, or stop it and submit "
                    f"it again")
        most = self._most_ever(queue, job.cluster)
        if job.gpus > most:
            return (f"the job needs {job.gpus} GPUs of {job.cluster} but queue {queue.name} can now hold at most "
                    f"{most:g} ({bound(self._config, queue, job.cluster)}): it waits, without holding up the jobs behind it, "
                    f"until that is raised, or stop it and submit a smaller one")
        used, total = self.cohort_use(tx, queue, job.cluster)
        mine, nominal, limit = used.get(queue.name, 0), queue.quota[job.cluster], queue.limit(job.cluster)
        excess = max(0, sum(used.values()) - total)  # a quota of the cohort lowered under what its jobs hold
        lent = sum(borrowed(used, {q.name: q.quota[job.cluster] for q in self._config.cohort_of(queue, job.cluster)}
                            ).values())  # the others' unused quota its members above theirs hold
        above = "" if mine <= nominal else f", {mine - nominal} borrowed" if queue.cohort and not excess else (
            f", {mine - nominal} above it: lowered since" if not (queue.cohort and lent) else f", {mine - nominal} "
            f"above it (borrowed, or held since a quota was lowered: the cohort holds {excess} above its quotas' sum)")
        text = (f"queue {queue.name} holds {mine} GPUs of {job.cluster} (quota {nominal}{above}), "
                f"the job needs {job.gpus}")
        if queue.cohort and mine + job.gpus > limit:  # what the cohort has free is not the queue's to take
            text += f", at most {limit:g} with borrowing (borrowing_limit {queue.may_borrow(job.cluster):g})"
        if queue.cohort:
            text += f"; cohort {queue.cohort}: {sum(used.values())}/{total} GPUs in use"
            if mine + job.gpus > nominal and (lender := self._lender_waiting(tx, queue, job.cluster, used)):
                text += f"; no job borrows while {lender}"  # order_admissions' lent_back
        ahead = tx.jobs_ahead(job, int(most))
        if ahead:
            text += f"; {ahead} job{'s' if ahead != 1 else ''} ahead of it in the queue"
        return text

    def _lender_waiting(self, tx: AdmissionRows, queue: QueueConfig, cluster: str, used: dict[str, int]) -> str | None:
        """A head of another queue of ``queue``'s cohort within its own quota that waits (for the quota it lent),
        by its queue and size, not its id (the line is shown to ``queue``'s members, who may not see that job:
        docs/how-to/console.md); None when there is none. Read without locks (as ``zen explain``'s reader may)."""
        for other in self._config.cohort_of(queue, cluster):
            if other.name == queue.name:
                continue
            held, nominal = used.get(other.name, 0), other.quota[cluster]
            head = tx.queue_head(other.name, cluster, int(self._most_ever(other, cluster)))
            if head is not None and held + head[1] <= nominal:
                return f"a job of queue {other.name} ({head[1]} GPUs) waits for the quota it lent"
        return None

    def no_room(self, tx: AdmissionRows, queue: QueueConfig, cluster: str, gpus: int) -> str | None:
        """Why a job of ``gpus`` GPUs of ``cluster`` would not be admitted in ``queue`` now, or None when
        it would: both what a pass checks, the queue's own limit (nominal quota plus what it may
        borrow) and the cohort's free quota (read without the cohort's lock: for choices, not for
        admission)."""
        used, total = self.cohort_use(tx, queue, cluster)
        mine, most = used.get(queue.name, 0), queue.limit(cluster)
        if sum(used.values()) + gpus > total:
            return f"queue {queue.name}'s cohort has no quota free"
        if mine + gpus > most:
            return f"queue {queue.name} has no quota free ({mine} GPUs held, at most {most:g} with borrowing)"
        return None

    def cohort_use(self, tx: AdmissionRows, queue: QueueConfig, cluster: str) -> tuple[dict[str, int], int]:
        """GPUs each queue of ``queue``'s cohort holds on ``cluster``, and the cohort's nominal quota there
        (read without the cohort's lock: for explanations and choices, not for admission)."""
        members = self._config.cohort_of(queue, cluster)
        held = {r["queue"]: r["gpus"] for r in tx.admitted([q.name for q in members], cluster)}
        return held, sum(q.quota[cluster] for q in members)

    def summary(self, tx: AdmissionRows, now: datetime | None = None) -> list[dict[str, Any]]:
        """Per queue and cluster: quota, borrowing limit, admitted GPUs and jobs by state (``zen queues``), and recent
        usage brought up to ``now`` (default: this moment) as a pass would, without saving it: passes bring it up
        to date only for queues with jobs waiting, so the stored value of a busy queue with none was its last."""
        now = now or utc_now()
        counts = {(r["queue"], r["cluster"]): r for r in tx.queue_counts()}
        usage = tx.queue_usage([q.name for q in self._config.queues])
        out = []
        for queue in self._config.queues:
            for cluster, nominal in queue.quota.items():
                row = counts.get((queue.name, cluster), {})
                admitted = row.get("admitted_gpus", 0)
                members = self._config.cohort_of(queue, cluster)
                lent = borrowed({q.name: counts.get((q.name, cluster), {}).get("admitted_gpus", 0) for q in members},
                                {q.name: q.quota[cluster] for q in members})
                seconds, since = usage.get((queue.name, cluster), (0.0, now))
                seconds = decay(seconds, max(0.0, (now - since).total_seconds()), admitted, self._half_life)
                out.append({
                    "queue": queue.name, "cohort": queue.cohort, "cluster": cluster, "quota_gpus": nominal,
                    "borrowing_limit": queue.may_borrow(cluster), "admitted_gpus": admitted,
                    "borrowed_gpus": lent[queue.name] if queue.cohort else 0, "pending": row.get("pending", 0),
                    "queued": row.get("admitted_waiting", 0), "running": row.get("running", 0),
                    "recent_gpu_hours": round(seconds / 3600.0, 2),
                })
        configured = {(q.name, cluster) for q in self._config.queues for cluster in q.quota}
        for (name, cluster), row in sorted(counts.items()):  # a queue (or its quota there) removed, its jobs still in
            if (name, cluster) not in configured and (row.get("admitted_gpus") or row.get("pending")):
                out.append({"queue": name, "cohort": None, "cluster": cluster, "quota_gpus": 0, "borrowing_limit": 0,
                            "admitted_gpus": row.get("admitted_gpus", 0), "borrowed_gpus": 0, "pending": row.get("pending", 0),
                            "queued": row.get("admitted_waiting", 0), "running": row.get("running", 0),
                            "recent_gpu_hours": None, "note": "not in the configuration: its jobs hold GPUs no quota counts"})
        return out
