"""The job state machine: a job's states (``JobStatus``) and the one transition table (``TRANSITIONS``) every
change of a job's status is checked against (``illegal_step``).

Job lifecycle (why: docs/explanations/delivery-guarantees.md)::

    PENDING ─▶ QUEUED ─▶ ASSIGNED ─▶ RUNNING ─▶ SUCCEEDED | FAILED
       │          │          │  ╲        │
       │          │          │   ╲───────┴─▶ STOPPING ─▶ CANCELLED (or SUCCEEDED/FAILED if it ended first)
       └──────────┴──────────┴─▶ CANCELLED
    ASSIGNED|RUNNING ─▶ LOST ─▶ QUEUED (attempt + 1) | FAILED (attempt budget spent)
    STOPPING ─▶ LOST (a gang the cloud took a node of, once its other nodes stopped: zen.core.gang)
    ASSIGNED ─▶ QUEUED (the same attempt: its VM gave the claim back unanswered and never ran it)
    ASSIGNED|RUNNING ─▶ PENDING (attempt + 1: a failed exit to retry, zen.core.retries)
    QUEUED|PENDING ─▶ SUCCEEDED | FAILED (a lost attempt's late final report, no attempt since: zen.jobs.late_final)
    ASSIGNED|RUNNING|STOPPING ─▶ SUCCEEDED (that late report a SUCCEEDED, its rerun held by a VM: told STOP)

Terminal states (SUCCEEDED, FAILED, CANCELLED) absorb: nothing leaves them.
"""

from __future__ import annotations

import enum


class JobStatus(str, enum.Enum):
    PENDING = "PENDING"
    QUEUED = "QUEUED"
    ASSIGNED = "ASSIGNED"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    LOST = "LOST"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def holds_vm(self) -> bool:
        """A VM is (or may be) working on the current attempt."""
        return self in (JobStatus.ASSIGNED, JobStatus.RUNNING, JobStatus.STOPPING)


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})

_S = JobStatus  # the table below reads as one row per state
TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    _S.PENDING: frozenset({_S.QUEUED, _S.CANCELLED, _S.SUCCEEDED, _S.FAILED}),
    _S.QUEUED: frozenset({_S.ASSIGNED, _S.CANCELLED, _S.PENDING, _S.SUCCEEDED, _S.FAILED}),
    _S.ASSIGNED: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.STOPPING, _S.LOST, _S.CANCELLED, _S.QUEUED,
                            _S.PENDING}),
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.FAILED, _S.STOPPING, _S.LOST, _S.CANCELLED, _S.PENDING}),
    _S.STOPPING: frozenset({_S.CANCELLED, _S.SUCCEEDED, _S.FAILED, _S.PENDING, _S.LOST}),
    _S.LOST: frozenset({_S.QUEUED, _S.FAILED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}


def can_transition(source: JobStatus, target: JobStatus) -> bool:
    return target in TRANSITIONS[source]


def illegal_step(start: JobStatus, path: list[JobStatus]) -> tuple[JobStatus, JobStatus] | None:
    """The first step of ``start -> path[0] -> path[1] ...`` that the table forbids, if any."""
    current = start
    for target in path:
        if not can_transition(current, target):
            return current, target
        current = target
    return None
