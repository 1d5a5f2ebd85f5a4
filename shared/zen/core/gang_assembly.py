"""A gang's assembly (``zen.core.gang``'s first part, pure): the tick's verdict on a gang not complete in time
(``assembly_expired``), a refused claim that keeps the assembly deadline (``keep_deadline``), a node's VM, or the VM
made under its name since (``successor``), claiming its part again (``claimed_again``), and what they share with the
rest of the gang's decisions: an order to one node (``order``), a node's CONFIRM with its place (``confirm``), the
fields a new attempt starts from (``RESET``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from zen.core.gang_records import GangConfig, GangNode, GangPlace, avoid_region, master_port
from zen.core.incarnation import claimed_before, held_since
from zen.core.lifecycle import Decision
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat, Job, JobStatus

RESET = dict(gang=None, start_regions=None, widen_at=None, start_vms=None)  # a new attempt assembles afresh


def order(job: Job, vm: str, action: ControlAction, reason: str, **extra: Any) -> ControlMessage:
    return ControlMessage(vm=vm, job_id=job.job_id, attempt=job.attempt, action=action, reason=reason, **extra)


def place(job: Job, nodes: list[GangNode], rank: int, config: GangConfig) -> GangPlace:
    return GangPlace(rank=rank, nodes=len(nodes), ips=[node.ip or node.vm for node in nodes],
                     port=master_port(config, job.job_id, job.attempt))


def confirm(job: Job, nodes: list[GangNode], node: GangNode, config: GangConfig) -> ControlMessage:
    return order(job, node.vm, ControlAction.CONFIRM, f"gang complete: rank {node.rank} of {len(nodes)}",
                 gang=place(job, nodes, node.rank, config))


def successor(job: Job, hb: Heartbeat, created: datetime | None) -> tuple[GangNode, str] | None:
    """The gang's node of ``hb.vm``'s name and why ``hb``, a claim, is not from its VM: the VM that sent it was
    created (``created``, its token says) after that node's claim (``zen.core.incarnation``). None otherwise."""
    node = next((n for n in job.gang or () if n.vm == hb.vm), None)
    if node is None or hb.status is not AgentStatus.CLAIMED or hb.attempt != job.attempt:
        return None
    gone = claimed_before(hb.vm, hb.attempt, held_since(job, hb.vm), created)
    return None if gone is None else (node, gone)


def claimed_node(rank: int, hb: Heartbeat, now: datetime) -> GangNode:
    """The node a claim (``hb``) makes in ``rank``: its VM, address, seq, claim time and its fence's timeout."""
    return GangNode(rank=rank, vm=hb.vm, region=hb.region, zone=hb.zone, ip=hb.ip, seq=hb.seq, beat_at=now, claimed_at=now,
                    timeout_s=hb.heartbeat_timeout_s)


def claimed_again(job: Job, mine: GangNode, hb: Heartbeat, now: datetime, created: datetime | None) -> Decision:
    """A claim, while the gang assembles, from a VM named as its node ``mine`` (``created``: when the VM was made, its
    token says; None unknown). The VM that claimed the part repeating its claim waits on, its seq kept (its older
    reports are late: ``zen.core.gang.decide_given_back``). A VM made after that claim (``zen.core.incarnation``) is
    the one its MIG made under the name once the claiming VM was gone: its claim replaces the node, as a new claim
    in its rank (its address, zone, seq and claim time), so that the gang's CONFIRMs, which its name's VM receives,
    tell every node the address of the VM that runs the part, and that VM's reports, made after the claim the node
    now holds, are its own. The old VM is gone (a zone holds one VM of a name) and none of the gang ran (no CONFIRM
    goes out before the last claim): no part runs twice. Taking the new VM is quicker than releasing it: released,
    it or another VM would claim the part again while the others wait."""
    nodes = list(job.gang or [])
    if (gone := successor(job, hb, created)) is not None:
        nodes[mine.rank] = claimed_node(mine.rank, hb, now)
        return Decision(fields=dict(gang=nodes), note=f"{gone[1]}; the new VM's claim replaces node {mine.rank}")
    if hb.seq <= mine.seq:
        return Decision(duplicate=True)
    nodes[mine.rank] = mine.model_copy(update={"seq": hb.seq})
    return Decision(fields=dict(gang=nodes))


def assembly_expired(job: Job, now: datetime, config: GangConfig, blocked: frozenset[str] = frozenset(),
                     unsettled: frozenset[str] = frozenset(), room: int | None = None) -> Decision | None:
    """The tick: a gang still QUEUED past its assembly deadline gives back the VMs that claimed a part and
    is retried as attempt + 1 (not spent: nothing ran), its starts published afresh. None: in time.

    Sooner when a stockout blocks the region it assembles in (``blocked``, as the planner's memory says: the
    planner asks a blocked region for no VM), but only while another of its regions is settled (not in
    ``unsettled``: blocked now, or a stockout found there within ``assemble_s`` and no VM booted since);
    else it would only move to a region as likely to fail it, while VMs freed here may still complete it.
    Sooner too when its region cannot hold the rest of it (``room``: ``RegionMemory.gang_room`` at the
    planner's last pass, idle and booting VMs plus the room under the limits; None: unknown, or that pass
    was before the gang's last claim, ``zen.jobs.sweeps``) and it may go to another region: VMs busy with
    other jobs, freed one by one, would claim parts there while the rest waits. (With no other region, its
    released VMs would claim it again at once.) The new attempt's start goes to the job's other regions
    first, the settled ones if any (``avoid_region``): the VMs given back, idle where the gang could not
    finish, would claim it again at once and wait out another deadline."""
    if job.status is not JobStatus.QUEUED or not job.gang or job.widen_at is None:
        return None
    vms, region = [node.vm for node in job.gang], job.gang[0].region
    others = [r for r in job.regions if r != region]
    settled = [r for r in others if r not in unsettled]
    in_time, need = job.widen_at > now, job.nodes - len(vms)
    short = room is not None and room < need and bool(others)  # none other: its VMs would claim it again
    if in_time and not short and (region not in blocked or not settled):
        return None
    why = (f"gang not complete within {config.assemble_s} s" if not in_time else
           f"{region} has room for {room} more of the {need} VM(s) the gang needs (its limits)" if short else
           f"{region} is stocked out")
    reason = (f"{why}: {len(vms)} of {job.nodes} nodes claimed ({', '.join(vms)}); they are released, and the "
              f"gang retried as attempt {job.attempt + 1}")
    fields = dict(RESET, attempt=job.attempt + 1, max_attempts=job.max_attempts + 1)
    if others:
        fields.update(avoid_region(settled or others, now, config))
        reason += f", its start sent to {', '.join(settled or others)} first (for {config.assemble_s} s)"
    return Decision(fields=fields, controls=[order(job, vm, ControlAction.RELEASE, reason) for vm in vms],
                    note=reason, publish_start=True)


def keep_deadline(job: Job, refused: Decision | None) -> Decision | None:
    """A refused claim (``zen.jobs.claims``) of an assembling gang keeps its assembly deadline: a refusal
    repeated would set ``widen_at`` to now, which for a gang means the deadline passed. Such a repeat, which
    publishes no start (a single VM's job's start is then the tick's to publish, by its ``widen_at``), publishes
    the one copy the VM refused drops: held back, the gang's missing node had no start left (a VM booted for it
    found none), and the gang waited out ``gangs.assemble_s``. One, not one per missing node (``start_copies``):
    a VM that keeps refusing, as its backoff lets it, takes and gives back the same copy, and copies do not pile up."""
    if refused is not None and job.gang and refused.fields.pop("widen_at", None) is not None and not refused.publish_start:
        refused.publish_start, refused.start_copies = True, 1
    return refused
