"""What Zen keeps and tells about a gang's nodes (a multi-node job: ``zen.core.gang``): ``GangNode``, one
node of an attempt as the job's row keeps it (``Job.gang``), and ``GangPlace``, a node's place in its gang
as its CONFIRM tells it (``ControlMessage.gang``)."""

from __future__ import annotations

import zlib
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from zen.core.cluster_config import Strict
from zen.core.reports import AgentStatus

# A node's final reports: it no longer runs its part (its VM may take other work); or SILENT, Zen's word for
# a node silent past the deadline while its gang stops the others (``zen.core.silence.decide_silence``); or
# GAVE_BACK, a node that gave its part back as the gang completed, while the others are stopped.
SILENT = "SILENT"
GAVE_BACK = "GAVE_BACK"
ENDED = frozenset({AgentStatus.SUCCEEDED.value, AgentStatus.FAILED.value, AgentStatus.STOPPED.value,
                   AgentStatus.PREEMPTED.value, SILENT, GAVE_BACK})


class GangConfig(Strict):
    """The configuration's ``gangs:`` (multi-node jobs)."""

    # 600 s: a gang's first node may claim from a warm VM while the others boot (a GPU VM boots in 2-5
    # minutes, a stockout's retry elsewhere takes another boot); past two boots the gang is unlikely to
    # complete soon and its claimed VMs idle at full price, so they are given back.
    assemble_s: int = Field(default=600, ge=30, le=86400, description=(
        "Seconds a gang's first node waits for the last; then its claimed VMs are released, the gang retried"))
    port: int = Field(default=29500, ge=1024, le=65535 - 1000, description="First MASTER_PORT (torchrun's default)")
    ports: int = Field(default=1000, ge=1, le=1000, description="MASTER_PORT is one of port .. port + ports - 1")


class GangNode(BaseModel):
    """The VM that claimed rank ``rank`` of a gang's attempt, and its last report."""

    model_config = ConfigDict(frozen=True)
    rank: int
    vm: str
    region: str
    zone: str
    ip: str | None = None  # its internal address (Heartbeat.ip), for ZEN_NODE_IPS
    status: str = "CLAIMED"  # its last report's AgentStatus
    seq: int = 0  # its last report's (each node counts its own: agents send epoch milliseconds)
    beat_at: datetime  # when Zen last heard from it (its claim, first)
    exit_code: int | None = None
    over_limit: str | None = None  # its report's (Heartbeat.over_limit): its failure is not retried
    left_running: bool = False  # its last report says its container may run on (LEFT_RUNNING): its VM is deleted
    # Its final report's first line where the agent wrote it ("zen: ..."): what the kernel or docker made of its end,
    # e.g. killed for want of memory (zen.core.retries.ended reads it, as a one-VM job's report's).
    message: str | None = None
    confirmed_at: datetime | None = None  # when the gang completed (its claim: ASSIGNED), where its usage starts
    # When Zen heard its claim (its first, the gang assembling): a VM made after it under its name never ran its part
    # (zen.core.incarnation). None on a node recorded before it was kept.
    claimed_at: datetime | None = None
    # How its flex-start VM's run ended, where its PREEMPTED came at that end (zen.jobs.flex_end): a later report of
    # another node, which ends the attempt (zen.core.gang_ends.settle), names this node's end so too.
    run_ended: str | None = None
    # What its agent's PREEMPTED said instead of its VM shutting down (``zen.core.gave_back.why``: "gave the attempt
    # back (<the agent's note>)"), a step before its part failed by the cloud's fault: the gang's history names it so.
    gave_back_why: str | None = None
    # While the gang assembles: when another node left it after this one's claim (the gang then needs one
    # more VM; a planner pass before then counted that VM busy: zen.core.gang.room_seen_after).
    left_at: datetime | None = None
    # The heartbeat_timeout_s its agent's fence was computed from, as its claim said (Heartbeat.heartbeat_timeout_s;
    # None: not said, the configuration's): the sweep waits the longest of the gang's (zen.core.lease.attempt_deadlines).
    timeout_s: float | None = None


def agents_line(message: str | None) -> str | None:
    """A node's final report's first line where the agent wrote it (``GangNode.message``), at most 300 characters."""
    first = (message or "").split("\n", 1)[0]
    return first[:300] if first.startswith("zen: ") else None


class GangPlace(BaseModel):
    """A node's place in its gang, told with the CONFIRM once every node has claimed its part."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    rank: int = Field(ge=0)
    nodes: int = Field(ge=2)
    ips: list[str]  # the nodes' internal addresses, rank order
    port: int = Field(ge=1, le=65535)  # rank 0 listens on it (MASTER_PORT)


def node_env(place: GangPlace) -> dict[str, str]:
    """What a gang's node's process finds in its environment: Zen's names and torchrun's."""
    rank, master = str(place.rank), place.ips[0]
    return {"ZEN_NODE_RANK": rank, "ZEN_NUM_NODES": str(place.nodes), "ZEN_NODE_IPS": ",".join(place.ips),
            "MASTER_ADDR": master, "MASTER_PORT": str(place.port), "NNODES": str(place.nodes), "NODE_RANK": rank}


# A node waits for the rest of its gang this much past ``assemble_s`` (the start message's ``assemble_s``):
# the tick that releases an incomplete gang comes within a minute of the deadline (the scale tick's
# default schedule), so a node gives its part back after that release, not a moment before the last claim.
RELEASE_MARGIN_S = 90


def node_wait_s(config: GangConfig) -> int:
    return config.assemble_s + RELEASE_MARGIN_S


def master_port(config: GangConfig, job_id: str, attempt: int) -> int:
    """Rank 0's rendezvous port: one of ``gangs.ports`` from ``gangs.port``, spread by job and attempt so
    that gangs sharing a host (the local stack) or a rerun next to a dying attempt do not collide."""
    return config.port + zlib.crc32(f"{job_id}:{attempt}".encode()) % config.ports


def word_after(was: str, reported: AgentStatus) -> str:
    """A node's status once it reported ``reported`` (``was``: before). A report overtaken by the node's later
    one does not undo it (a restarted agent's CLAIMED after RUNNING); the first end stays (a spare claim's
    STOPPED after the node's exit 0, its PREEMPTED once its fence fell after Zen called it SILENT), except the
    node's own exit, which replaces Zen's word of its silence."""
    if was in ENDED and not (was == SILENT and reported in (AgentStatus.SUCCEEDED, AgentStatus.FAILED)):
        return was
    return was if was == AgentStatus.RUNNING.value and reported is AgentStatus.CLAIMED else reported.value


def most_silent(nodes: list[GangNode]) -> GangNode:
    """The node heard from longest ago among those at work (one that sent its final report is silent on purpose)."""
    return min((n for n in nodes if n.status not in ENDED), key=lambda n: n.beat_at,
               default=max(nodes, key=lambda n: n.beat_at))


def fence_timeout_s(nodes: list[GangNode] | None) -> float | None:
    """The longest ``heartbeat_timeout_s`` a gang's nodes said their fences are computed from (None: none said): kept
    with the attempt once the gang is complete (``Job.fence_timeout_s``), the sweep waits it for the whole gang
    (``zen.core.lease.attempt_deadlines``)."""
    return max((n.timeout_s for n in nodes or () if n.timeout_s is not None), default=None)


def broken_by(killed: GangNode, failed: GangNode, max_runtime_s: int | None) -> bool:
    """Whether ``failed`` (at no limit) may be a peer that ``killed``'s stop at its limit broke, reporting first (its
    report waits for no last save nor upload): not if Zen heard it before that limit could fire, ``max_runtime_s`` after
    the CONFIRM (a node stages and runs its part after it): that failure came first, on its own (``first_failure``)."""
    if killed.over_limit is None:
        return False
    if killed.over_limit != "max_runtime_s" or max_runtime_s is None or killed.confirmed_at is None:
        return True  # (its share of the disk: full at any time)
    return failed.beat_at >= killed.confirmed_at + timedelta(seconds=max_runtime_s)


def first_failure(nodes: list[GangNode], max_runtime_s: int | None) -> GangNode | None:
    """The failure that ends a gang's attempt (``zen.core.gang_ends.settle``): the first heard, but a node stopped at its
    limit before any that its stop may have broken (``broken_by``)."""
    failures = sorted((n for n in nodes if n.status == AgentStatus.FAILED.value), key=lambda n: n.beat_at)
    killed = next((n for n in failures if n.over_limit), None)
    if killed is not None and all(broken_by(killed, n, max_runtime_s) for n in failures[:failures.index(killed)]):
        return killed
    return next(iter(failures), None)


# A planner pass that read the fleet less than this after a claim may not have seen it: the claim's time is
# taken before its transaction commits (``room_seen_after``).
ROOM_AFTER_CLAIM_S = 2.0


def room_seen_after(nodes: list[GangNode], measured_at: datetime | None) -> bool:
    """Whether a gang's room measured by a planner pass that read the fleet at ``measured_at`` counts for
    ``assembly_expired``: only if that pass saw the gang as it is, every claim of ``nodes`` and every node
    that left it since (``GangNode.left_at``). One before saw the region as it was for other jobs or the
    gang's previous attempt: a node of it still busy, a preempted one that its MIG is recreating not yet
    booting, so the gang's first claim would be released for room the recreated VM is about to give it."""
    changed = max(node.left_at or node.beat_at for node in nodes)
    return measured_at is not None and measured_at > changed + timedelta(seconds=ROOM_AFTER_CLAIM_S)


def avoid_region(elsewhere: list[str], now: datetime, config: GangConfig) -> dict[str, Any]:
    """A new attempt's start narrowed to ``elsewhere`` (the job's regions but the one that could not finish
    it, the settled ones if any) for ``assemble_s``; the tick then widens it to every allowed region
    (``zen.core.routing.next_route``)."""
    return dict(start_regions=elsewhere, widen_at=now + timedelta(seconds=config.assemble_s))

