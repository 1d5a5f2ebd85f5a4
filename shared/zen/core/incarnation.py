"""Which VM of a name a report comes from. A MIG gives the VM it recreates (after a preemption, a repair, a
delete) the name of the one it replaces, and that VM's token names it as truly as the old one's did; the token
also says when the VM was created (``instance_creation_timestamp``: ``zen.adapters.vm_proof.Proven.created_at``).
A report about an attempt claimed before its VM existed is not that VM's: the VM that claimed it is gone, and
a RUNNING from its successor kept the attempt alive while nothing ran it, a SUCCEEDED ended it.
Why: docs/explanations/security.md, "A heartbeat must prove its VM".
"""

from __future__ import annotations

from datetime import datetime, timedelta

from zen.core.lifecycle import Decision
from zen.core.models import AgentStatus, Heartbeat, Job

SKEW_S = 60.0  # GCE's clock (the creation time) and Zen's (the claim's) may differ this much


def made_since(created: datetime | None) -> datetime | None:
    """The earliest moment, on Zen's clock, the VM of a token created at ``created`` may have claimed anything."""
    return None if created is None else created - timedelta(seconds=SKEW_S)


def claimed_before(vm: str, attempt: int, claimed_by: datetime | None, created: datetime | None) -> str | None:
    """Why a report of VM ``vm`` created at ``created`` is not about attempt ``attempt``, which it (by name) held
    already at ``claimed_by`` (Zen's clock); None when it may be."""
    since = made_since(created)
    if since is None or claimed_by is None or claimed_by >= since:
        return None
    return (f"VM {vm} was created after attempt {attempt} of this job was claimed (created {created:%Y-%m-%d %H:%M:%S} "
            f"UTC, its token says; the attempt held by that name since {claimed_by:%Y-%m-%d %H:%M:%S} UTC): its MIG "
            "recreated the VM that claimed it under its name, and the new VM never ran it")


def held_since(job: Job, vm: str | None = None) -> datetime | None:
    """A moment the job's attempt was held by ``vm`` already: its start, else the row's last change (both
    written at the claim or after it; a later change makes the check weaker, never wrong), and a gang's node of
    ``vm`` its own claim (``GangNode.claimed_at``: the gang may complete, and its row change, long after)."""
    node = next((n.claimed_at for n in job.gang or () if n.vm == vm), None)
    return min((at for at in (job.started_at, job.updated_at, node) if at is not None), default=None)


def not_its_vm(job: Job, hb: Heartbeat, created: datetime | None) -> Decision | None:
    """The refusal of ``hb`` about the attempt ``job`` holds on a VM of ``hb.vm``'s name (its VM, or one of a
    gang's nodes: each claimed before the gang was complete), when the reporting VM was created after that attempt
    was claimed (the module's docstring); None otherwise. A claim is left to ``zen.core.lifecycle``, which answers
    it as a claim of the holder's again, and to ``zen.core.gang``: while the gang assembles the new VM's claim replaces
    the node of its name (``gang_assembly.claimed_again``); once it is complete, that claim is released and the gang
    retried, the other nodes told the gone VM's address."""
    holds = hb.vm == job.vm or any(node.vm == hb.vm for node in job.gang or ())
    if hb.status is AgentStatus.CLAIMED or not holds or hb.attempt != job.attempt or not job.status.holds_vm:
        return None
    reason = claimed_before(hb.vm, hb.attempt, held_since(job, hb.vm), created)
    return None if reason is None else Decision(ignored=reason)
