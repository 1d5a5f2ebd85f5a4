"""Rows of the scaling side: demand per cluster, the VMs and MIG instances Zen knows, drains, the
planner's memory, scaling decisions, and the per-cluster advisory lock. Every call runs in the
caller's session or transaction (``zen.store.db``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from zen.core.provisioning import region_of
from zen.core.reports import LEFT_RUNNING
from zen.store.encoding import to_json

if TYPE_CHECKING:
    from zen.store.db import Session

# A VM's warm cache counts for routing while its agent was heard from this recently: three of the
# agent's VM heartbeats (every 60 s by default, ZEN_AGENT_VM_HEARTBEAT_S).
WARM_VM_SEEN_S = 180.0
# A gap in the ticks (no tick for this long, nor 1.5 of their interval): Zen may have been down. The
# sweep's is ``deadlines.heartbeat_timeout_s`` / 2, 60 s by default.
TICK_GAP_S = 60.0


def try_cluster_lock(session: Session, cluster: str) -> bool:
    """One scaling pass per cluster at a time (session-level advisory lock; False: someone has it)."""
    locked: bool = session.one_row("try_cluster_lock", cluster=cluster)["locked"]
    return locked


def cluster_unlock(session: Session, cluster: str) -> None:
    session.one("cluster_unlock", cluster=cluster)


def queued_demand(session: Session, cluster: str, now: datetime, bound_s: int,
                  with_inputs: bool = False) -> list[dict[str, Any]]:
    """The cluster's QUEUED jobs counted by (priority, regions, ...): ``priority, regions, jobs, oldest``, and ``late``:
    queued for their start bound or longer at ``now`` (their own, else ``bound_s``, the cluster's); ``inputs``, their
    input lists, read only ``with_inputs`` (``zen.scaling.egress.weighs_inputs``)."""
    return session.run("queued_demand", cluster=cluster, now=now, bound=bound_s, with_inputs=with_inputs)


def queued_demand_by_gpus(session: Session, cluster: str, now: datetime, bound_s: int) -> list[dict[str, Any]]:
    """``queued_demand`` split by the GPUs each job holds: ``priority, regions, gpus, jobs, oldest, late``."""
    return session.run("queued_demand_by_gpus", cluster=cluster, now=now, bound=bound_s)


def queue_heads(session: Session, clusters: list[str]) -> dict[str, tuple[int, datetime]]:
    """Cluster -> its most urgent QUEUED job's (priority, queued_at): the highest priority, the oldest at it; a
    cluster with no queued job is not named."""
    return {r["cluster"]: (r["priority"], r["oldest"]) for r in session.run("queue_heads", clusters=clusters)}


def vm_loads(session: Session, cluster: str) -> dict[str, tuple[int, int]]:
    """VM name -> (jobs, GPUs) it holds, for the cluster's VMs that hold any."""
    return {r["vm"]: (r["jobs"], r["gpus"]) for r in session.run("vm_loads_of_cluster", cluster=cluster)}


def held_vms(session: Session, cluster: str) -> dict[str, str]:
    """VM name -> the job it holds (assigned, running or stopping; not a retired VM's stopping job whose container
    may still run, ``LEFT_RUNNING``: that VM is deleted), as SQL's ``vm_holders`` defines it for the drain too."""
    return {r["vm"]: r["job_id"] for r in session.run("held_vms_of_cluster", cluster=cluster, left_running=LEFT_RUNNING)}


def agents(session: Session, cluster: str) -> dict[str, dict[str, Any]]:
    """VM name -> what its agent last said (``state``, ``idle_since``, ``last_seen_at``, ...), and
    ``heard_since``: when Zen could hear again after an outage of its own (``heard_since``)."""
    rows = session.run("vms_of_cluster", cluster=cluster)
    since = heard_since(session.one("read_tick_clock"), [r["last_seen_at"] for r in rows])
    return {r["name"]: {**r, "heard_since": since} for r in rows}


def heard_since(clock: dict[str, Any] | None, seen: list[datetime | None]) -> datetime | None:
    """Since when an agent's silence says something about its VM, as the lost-job sweep counts a
    job's (``zen.jobs.sweeps.sweep_lost``): while Zen itself was down, no heartbeat could be recorded.
    ``clock``: the tick clock's row (``record_tick``, which the tick's sweep runs before its scaling
    pass): its ``back_at``, the first tick after a gap. Before that tick (a submission's pass right
    after an outage), when heartbeats are recorded again (``seen``: the cluster's agents' last ones)
    further past the last tick than a gap, silence counts from the newest of them. None: no tick yet."""
    if clock is None:
        return None
    back: datetime | None = clock["back_at"]
    newest = max((at for at in seen if at is not None), default=None)
    gap = timedelta(seconds=max(TICK_GAP_S, 1.5 * (clock["interval_s"] or 0)))
    if newest is not None and newest > clock["last_at"] + gap and (back is None or newest > back):
        return newest
    return back


def drained_vms(session: Session, cluster: str) -> frozenset[str]:
    """The cluster's VMs marked for a scale-down (claims refused) and still in their MIG."""
    return frozenset(r["name"] for r in session.run("drained_vms_of_cluster", cluster=cluster))


def arrivals_since(session: Session, cluster: str, since: datetime) -> int:
    arrivals: int = session.one_row("arrivals_since", cluster=cluster, since=since)["n"]
    return arrivals


def scaling_memory(session: Session, cluster: str) -> dict[str, Any]:
    """Region -> the planner's memory as stored (JSON)."""
    return {r["region"]: r["memory"] for r in session.run("scaling_memory", cluster=cluster)}


def _moment(memory: dict[str, Any], key: str) -> datetime | None:
    """A time the planner's memory keeps (ISO text), or None."""
    return datetime.fromisoformat(memory[key]) if memory.get(key) else None


def blocked_regions(session: Session, cluster: str, now: datetime, since: datetime | None = None) -> set[str]:
    """The cluster's regions the planner will not ask for VMs before a later time (a stockout's block);
    with ``since``, also those where it last found a stockout after then and no VM booted since."""
    def lately(memory: dict[str, Any]) -> bool:
        found, booted = _moment(memory, "last_stockout_at"), _moment(memory, "last_boot_at")
        return since is not None and found is not None and found > since and not (booted is not None and booted > found)

    return {region for region, memory in scaling_memory(session, cluster).items()
            if ((until := _moment(memory or {}, "blocked_until")) is not None and until > now) or lately(memory or {})}


def gang_rooms(session: Session, cluster: str) -> dict[str, tuple[int, datetime | None]]:
    """Pool -> (the planner's ``gang_room`` at its last pass there, ``zen.scaling.model.RegionMemory``, plus the VMs
    of its region that are gangs' nodes in flight now (``gang_nodes_in_flight``: busy to that pass, their claims on
    the way, they are no room lacking); when that pass read the fleet and the jobs, ``gang_room_at``, None if
    unrecorded)."""
    flying = {r["region"]: r["vms"] for r in session.run("gang_nodes_in_flight", cluster=cluster)}
    return {pool: (int(memory["gang_room"]) + flying.get(region_of(pool), 0), _moment(memory, "gang_room_at"))
            for pool, memory in scaling_memory(session, cluster).items() if memory and memory.get("gang_room") is not None}


def vms_holding(session: Session, cluster: str, regions: list[str], inputs: list[str], image: str | None,
                now: datetime, limit: int = 20) -> list[tuple[str, str, bool, str | None]]:
    """(name, region, offered, model) of idle VMs in ``regions`` whose warm cache holds all of ``inputs``
    (URIs), or ``image``, among VMs heard from in the last ``WARM_VM_SEEN_S`` (a VM that died silently
    leaves its row behind), holding no job (one it claimed since). ``offered``: a QUEUED job's start is
    offered to it already; ``model``: the one a scaling pass recorded for it (``vm_model``'s; None: none).
    Those not offered come first, then the most recently heard from; at most ``limit``."""
    return [(r["name"], r["region"], r["offered"], r["model"]) for r in session.run(
        "vms_holding", cluster=cluster, regions=to_json(regions), inputs=to_json(inputs), image=image,
        seen_after=now - timedelta(seconds=WARM_VM_SEEN_S), limit=limit)]


def last_scaling_pass(session: Session, cluster: str) -> datetime | None:
    """When a scaling pass last recorded the cluster's memory (every pass does, for each region it read)."""
    at: datetime | None = session.one_row("last_scaling_pass", cluster=cluster)["at"]
    return at


def save_scaling_memory(session: Session, cluster: str, region: str, memory: str, now: datetime) -> None:
    session.run("save_scaling_memory", cluster=cluster, region=region, memory=memory, now=now)


def keep_request_failure(session: Session, cluster: str, pool: str, failure: str, now: datetime) -> None:
    """Keep a failed flex-start request (``failure``: JSON) a pass read and dropped unplanned (``zen.scaling.reported``)."""
    session.run("keep_request_failure", cluster=cluster, pool=pool, failure=failure, now=now)


def kept_request_failures(session: Session, cluster: str) -> list[dict[str, Any]]:
    """The cluster's kept request failures, oldest first: ``id``, ``pool``, ``failure`` (as stored)."""
    return session.run("kept_request_failures", cluster=cluster)


def forget_request_failures(session: Session, cluster: str, ids: list[int]) -> None:
    """Delete the kept request failures a pass planned with."""
    if ids:
        session.run("forget_request_failures", cluster=cluster, ids=ids)


def see_instances(session: Session, cluster: str, region: str, names: list[str], now: datetime,
                  billed: list[str] | None = None, model: str | None = None,
                  price: PoolPrice | None = None) -> dict[str, datetime]:
    """Record the MIG's instances as seen now, and those of them whose VM GCE bills now (``billed``; None:
    every one, for callers that list no status) as billed from now unless they were already; returns when
    each was first seen. ``model``: the pool's provisioning model, kept with a new instance (what its fleet
    dollars are priced at); ``price``: what prices the pool now, kept with each billed segment that begins
    (None: none kept, today's prices apply). Instances no longer in the MIG are forgotten (with their drain
    mark and VM row)."""
    price = price or PoolPrice()
    first_seen = {r["name"]: r["first_seen_at"] for r in session.run(
        "see_mig_instances", cluster=cluster, region=region, names=names, now=now,
        billed=names if billed is None else billed, model=model, machine_type=price.machine_type,
        fixed=price.fixed, use_catalog=price.catalog, fallback=price.fallback)} if names else {}
    session.run("forget_vanished_instances", cluster=cluster, region=region, present=names, left_at=now)
    return first_seen


@dataclass(frozen=True)
class PoolPrice:
    """What prices a pool's VMs as a scaling pass sees them (``zen.scaling.fleetdb.FleetDb``): its machine type, a
    configured price (``fixed``), whether the catalog's stored price comes next, else the snapshot's (``fallback``)."""

    machine_type: str | None = None
    fixed: float | None = None
    catalog: bool = False
    fallback: float | None = None


def forget_dropped_pools(session: Session, configured: dict[str, tuple[str, ...]]) -> dict[tuple[str, str], list[str]]:
    """Forget the instances and the planner's memory of every pool the configuration no longer has
    (``configured``: cluster -> its pools): no pass lists such a pool again (terraform destroys its MIG), so
    its last-seen instances stayed in every VM count (``zen watch``, the console, ``zen stats``) and its memory
    of VMs booting made every usable VM's heartbeat run a pass (``ClusterOrchestrator.racing``). Their
    instances are kept as seen until now (``vm_lifetimes``), not as seen leaving their MIG (``left_at`` -infinity: a job's
    VM of such a pool silent later was not seen stop by any pass, ``zen.jobs.cloud_silence``; NULL is a lifetime the
    release before migration 0062 kept, read as that release read it). Returns the pools forgotten, each with the
    instances its last pass listed: billed until terraform destroys the MIG, and no longer shown (the tick says so)."""
    dropped = [(r["cluster"], r["region"]) for r in session.run("fleet_pools")
               if r["region"] not in configured.get(r["cluster"], ())]
    forgotten = {}
    for cluster, pool in dropped:
        gone = session.run("forget_vanished_instances", cluster=cluster, region=pool, present=[], left_at=None)
        forgotten[(cluster, pool)] = [r["name"] for r in gone]
        session.run("forget_pool_memory", cluster=cluster, region=pool)
    return forgotten


def mig_instance_names(session: Session) -> list[tuple[str, str, str]]:
    """(name, cluster, region) of every instance the MIGs listed at the last passes, newest first."""
    return [(r["name"], r["cluster"], r["region"]) for r in session.run("mig_instance_names")]


def vms_gone_since(session: Session, since: datetime) -> list[tuple[str, str, str]]:
    """(name, cluster, region) of every instance a pass saw in its MIG after ``since`` that no MIG lists now."""
    return [(r["name"], r["cluster"], r["region"]) for r in session.run("control_vms_gone", since=since)]


def vms_seen_leaving(session: Session, names: list[str]) -> set[str]:
    """Those of ``names`` a pass saw leave their MIG (their latest lifetime's): not those forgotten unseen, a
    dropped pool's (``forget_dropped_pools``), which may still run and be listed again."""
    return {r["name"] for r in session.run("control_vms_left", names=names)} if names else set()


def drain_unless_busy(session: Session, vm: str, cluster: str, region: str, now: datetime) -> bool:
    """Mark ``vm`` as going away unless it holds a job, under the VM's advisory lock (which a claim
    by that VM also takes: see ``repository.vm_is_draining``). True when drained."""
    session.run("lock_vm", vm_name=vm)
    if session.one("vm_holds_job", vm_name=vm, left_running=LEFT_RUNNING):
        return False
    session.run("drain_vm", vm_name=vm, cluster=cluster, region=region, now=now)
    return True


def add_scaling_decision(session: Session, *, cluster: str, region: str | None, action: str, count: int | None,
                         vm: str | None, reason: str, now: datetime) -> None:
    session.run("insert_scaling_decision", now=now, cluster=cluster, region=region, action=action, count=count,
                vm=vm, reason=reason)


def recent_decisions(session: Session, cluster: str | None, limit: int) -> list[dict[str, Any]]:
    """The latest scaling decisions (of one cluster, or all), newest first."""
    return session.run("recent_scaling_decisions", cluster=cluster, limit=limit)


def mig_instances(session: Session) -> list[dict[str, Any]]:
    """Every MIG instance Zen has seen and not yet seen go: ``name, cluster, region, first_seen_at``."""
    return session.run("list_mig_instances")
