"""Queues with GPU quotas in the simulator: the production admission core
(``zen.jobs.queueing.order_admissions``, ``QueueState``, ``decay``) over the simulation's jobs.

A scenario's ``queues:`` (the shape of ``zen.core.config``'s) makes every submission go through its
user's queue (``SimJob.user``; else the queue named ``default``): a job that does not fit stays
pending, is not demand and is offered to the world only once admitted; a job's end frees its quota
and runs a pass. Preemption is not modelled (a queue whose quota is lent waits for borrowed jobs to
end). ``violations`` counts any moment a queue or cohort held more than its quota (it must stay 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zen.core.config import QueueConfig, cohort_of
from zen.jobs.queueing import QueueState, decay, order_admissions


@dataclass
class _Waiting:
    priority: int
    submitted_at: float
    job_id: str
    gpus: int
    job: Any  # the simulation's job


class SimQueues:
    def __init__(self, queues: list[QueueConfig], gpus_per_vm: dict[str, int], half_life_s: float):
        self._queues = {q.name: q for q in queues}
        self._gpus = gpus_per_vm
        self._half_life = half_life_s
        self.used: dict[tuple[str, str], int] = {}
        self._waiting: dict[tuple[str, str], list[_Waiting]] = {}
        self._usage: dict[tuple[str, str], tuple[float, float]] = {}  # (GPU-seconds, as of)
        self._queue_of: dict[str, str] = {}  # job id -> its queue, while it holds quota
        self.violations = 0
        self.admitted_at: dict[str, float] = {}

    def queue_for(self, user: str | None) -> QueueConfig:
        for queue in self._queues.values():
            if user in queue.users:
                return queue
        if "default" in self._queues:
            return self._queues["default"]
        raise ValueError(f"no queue for user {user!r} and no queue named default")

    def submit(self, job, now: float) -> list:
        """A new job: the jobs (this one or none) that may be offered now."""
        queue = self.queue_for(job.spec.user)
        cluster = job.spec.cluster
        entry = _Waiting(job.spec.priority, job.spec.submit_s, job.spec.job_id, self._gpus[cluster], job)
        waiting = self._waiting.setdefault((queue.name, cluster), [])
        waiting.append(entry)
        waiting.sort(key=lambda w: (-w.priority, w.submitted_at, w.job_id))
        return self._pass(queue, cluster, now)

    def release(self, job, now: float) -> list:
        """A job ended: its quota is free; the jobs admitted in its place."""
        name = self._queue_of.pop(job.spec.job_id, None)
        if name is None:
            return []
        cluster = job.spec.cluster
        self._accrue(cohort_of(list(self._queues.values()), self._queues[name], cluster), cluster, now)
        self.used[(name, cluster)] -= self._gpus[cluster]
        return self._pass(self._queues[name], cluster, now)

    def _accrue(self, members: list[QueueConfig], cluster: str, now: float) -> None:
        for q in members:
            seconds, since = self._usage.get((q.name, cluster), (0.0, now))
            self._usage[(q.name, cluster)] = (
                decay(seconds, now - since, self.used.get((q.name, cluster), 0), self._half_life), now)

    def _pass(self, queue: QueueConfig, cluster: str, now: float) -> list:
        members = cohort_of(list(self._queues.values()), queue, cluster)
        self._accrue(members, cluster, now)
        state = [QueueState.of(q, cluster, self.used.get((q.name, cluster), 0),
                               self._usage[(q.name, cluster)][0] / self._half_life,
                               self._waiting.get((q.name, cluster), []))
                 for q in members]
        cohort_quota = sum(q.nominal for q in state)
        admitted = order_admissions(state, sum(q.used for q in state), cohort_quota)
        for q in state:
            self.used[(q.config.name, cluster)] = q.used
            self.violations += q.used > q.limit
        self.violations += sum(q.used for q in state) > cohort_quota
        out = []
        for queue_state, entry, _ in admitted:
            self._queue_of[entry.job_id] = queue_state.config.name
            self.admitted_at[entry.job_id] = now
            out.append(entry.job)
        return out
