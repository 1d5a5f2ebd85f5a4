"""Boots that do not deliver, for the planner (``zen.scaling.planner``): which booting VMs are stuck
(:func:`booting`), and the probes among them: instances of a blocked pool still waiting for capacity. A
probe bills nothing and keeps the pool's place for when capacity returns: one per pool that demand wants
is kept (:func:`pruned`); at the cluster's ``max_vms``, they give their places to pools that are not
stocked out (:func:`giving_way`). A blocked pool that delivers again unblocks its region's cheaper pools
blocked since no later than it was (:func:`recovered_with`); the creation errors a pool has not seen yet
(:func:`unseen_errors`); a pool struck (:func:`strike`). Pure. Why, and what it was measured to do:
docs/explanations/scaling.md.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Mapping

from zen.core.provisioning import PENDING_SEP, region_of
from zen.scaling import quotas
from zen.scaling.model import Action, ClusterLimits, Decision, ErrorKind, MigError, RegionMemory, Timing, Vm, VmPhase
from zen.scaling.reported import reported_once

if TYPE_CHECKING:
    from zen.scaling.ranking import Ranking

CAPACITY_ERRORS = (ErrorKind.STOCKOUT, ErrorKind.QUOTA)
RESIZE_WHY_CHARS = 300  # of what Compute said of a failed resize, kept in the pool's memory for its jobs' reason
SILENT_IN_A_ROW = 3  # VMs of a cluster in a row that got capacity and were never usable: its VMs, not a shortage
SILENT_MAX_BLOCK_S = 4 * 3600.0  # the longest such a cluster waits between two VMs (each billed until it goes)


def strikes(error: MigError) -> bool:
    """Whether ``error`` strikes its pool: a stockout or a quota error, or a flex-start resize request that failed
    whatever the reason (``zen.adapters.flex_start``: Compute does not try it again, and asked again as it was it
    would fail again, pass after pass)."""
    return error.kind in CAPACITY_ERRORS or reported_once(error)


def strike(memory: RegionMemory, pool: str, why: str, now: datetime, timing: Timing,
           quota: str = "", resize: str = "") -> tuple[RegionMemory, Decision]:
    """A pool struck (a stockout, a boot stuck, a GPU quota: ``quota`` "read", the tick's quota read found no room
    for one more VM, or "refused", Compute's QUOTA_EXCEEDED; a resize that failed: ``resize``, what Compute said,
    which a held job's reason quotes, :func:`held_reason`): blocked for ``block_s``, doubled a strike up to
    ``max_block_s``; its memory after, and the decision that says so."""
    strikes = memory.strikes + 1
    block = min(timing.block_s * 2 ** (strikes - 1), timing.max_block_s)
    return (memory.replaced(strikes=strikes, last_stockout_at=now, blocked_until=now + timedelta(seconds=block),
                            quota_block=quota, resize_failed=resize),
            Decision(Action.BLOCK, pool, f"{why}; blocked for {block:g}s (strike {strikes})"))


def silent_boot(memory: dict[str, RegionMemory], pool: str, vm: Vm, got_s: float, now: datetime,
                timing: Timing) -> list[Decision]:
    """``vm`` of ``pool`` got capacity ``got_s`` ago and is not usable (its guest or agent never came up): the pool
    struck, and its ``silent`` count up. From the ``SILENT_IN_A_ROW``-th such VM since one of the cluster's VMs was
    last usable, the blocks are longer than any stockout's: ``block_s`` doubled per such VM, up to
    ``SILENT_MAX_BLOCK_S`` (each VM is billed while it is given its chance). Of one pool alone (its region's
    network, say), that pool's alone; from two pools or more (a VM image or startup script that fails, a service
    account that cannot reach Pub/Sub: every region's VMs alike), every pool's, those that failed too a little
    longer than this one (one VM tries again, not one in each) and those never tried no longer than it: with one
    job queued, a VM every few hours instead of one every ~20 minutes in each region. A VM usable lifts its own
    pool's, and those of pools whose own VMs never failed (``silent_cleared``)."""
    why = f"{vm.name} got capacity {got_s:.0f}s ago and is not usable (its agent was never heard)"
    memory[pool] = memory[pool].replaced(silent=memory[pool].silent + 1)
    failing = [each for each, m in memory.items() if m.silent]
    in_a_row = sum(memory[each].silent for each in failing)
    if in_a_row < SILENT_IN_A_ROW:
        memory[pool], decision = strike(memory[pool], pool, why, now, timing)
        return [decision]
    block = min(timing.block_s * 2 ** (in_a_row - 1), max(SILENT_MAX_BLOCK_S, timing.max_block_s))
    whose = "the cluster's image or startup script" if len(failing) > 1 else "this region's network or its VMs"
    decisions = []
    for each, m in memory.items():
        if each != pool and len(failing) == 1:
            continue
        until = now + timedelta(seconds=block + (timing.max_block_s if each != pool and m.silent else 0))
        if m.blocked_until is None or m.blocked_until < until or m.quota_block:  # a quota's later one: a read lifts it
            memory[each] = m.replaced(blocked_until=until, quota_block="", resize_failed="", **(
                {"strikes": m.strikes + 1, "last_stockout_at": now} if each == pool else {}))
            decisions.append(Decision(Action.BLOCK, each, f"{in_a_row} VMs in a row got capacity and were never usable "
                                      f"({why}): {whose} fails? (docs/how-to/operate.md); "
                                      f"blocked for {(until - now).total_seconds():g}s"))
    return decisions


def cause(errors: list[MigError]) -> dict[str, str]:
    """What a strike for ``errors`` (capacity errors of one pass) keeps of its cause, for the jobs held there
    (:func:`held_reason`): its quota (:func:`quota_kind`), and Compute's words when each is a flex-start request
    that failed for a reason other than capacity (``resize``: no stockout, nor any probe; it was said to be one)."""
    other = [e for e in errors if e.kind not in CAPACITY_ERRORS]
    said = (other[-1].detail or other[-1].kind.value.lower()) if other and len(other) == len(errors) else ""
    return {"quota": quota_kind(errors), "resize": clipped(said)}


def clipped(said: str) -> str:
    """What Compute said of a failed resize, as a pool's memory keeps it (``RegionMemory.resize_failed``)."""
    return said if len(said) <= RESIZE_WHY_CHARS else said[:RESIZE_WHY_CHARS - 1] + "…"


def quota_kind(errors: list[MigError]) -> str:
    """``RegionMemory.quota_block`` of a strike for ``errors`` (capacity errors of one pass): "read" when each is the
    tick's quota read's (a ``MigError.detail`` of no instance: a failed flex-start request's names its own, and its
    block was lifted by the next read with room, pass after pass); "refused" when Compute refused one for quota,
    "refused:<quotas>" when each refusal named a GPU quota the tick reads (``MigError.quota``: another cluster's
    VMs took its room, say), which a read with room lifts as it does its own blocks; else ""."""
    read = [e for e in errors if e.detail and e.instance is None]
    if len(read) == len(errors):
        return "read"
    others = [e for e in errors if e not in read]
    refused = [e.quota for e in others if e.kind is ErrorKind.QUOTA]
    if not refused:
        return ""
    named = len(refused) == len(others) and None not in refused  # (a stockout beside it: no read lifts that)
    return "refused:" + ",".join(sorted({q for q in refused if q})) if named else "refused"


def held_reason(memory: Mapping[str, RegionMemory], known: list[str], blocked: list[str], now: datetime,
                timing: Timing, flex: Callable[[str], bool], short: Collection[str] = ()) -> str:
    """Why a job waits whose allowed pools (``known``) take no more VMs: those not ``blocked`` are at their limit,
    or short of quota (``short``: the pools the last quota read leaves no room in; one was said to be at its limit
    too); of the blocked, the cluster's VMs never usable
    (``silent_boot``'s block: one of these pools' own VMs, or a block longer than a stockout's), a GPU quota (one
    of ``short``, struck by the tick's read; or Compute's QUOTA_EXCEEDED: ``quota_block``), its MIG's resize that
    failed (``resize_failed``: refused, or sent and never answered; no stockout, nor any probe), a flex-start request
    still queued (a queue is no stockout), else a stockout. (The silent count was read cluster-wide whatever pools the
    job allows, a queue was said to be stocked out, and a stocked-out pool beside full ones at its limit; pools a
    quota held back, or whose resize failed, were said to be stocked out, "probes are waiting for capacity".)"""
    full = [p for p in known if p not in blocked and p not in short]  # (a pool short of quota was at its limit too)
    room = f"; the last GPU quota read leaves no room for more in {', '.join(short)}" if short else ""
    if not blocked and not short:
        return "allowed regions' MIGs are at their limit (max_vms_per_region, per provisioning model)"
    lead = f"at their limit (max_vms_per_region): {', '.join(full)}{room}; " if full else room[2:] + "; " if room else ""
    if not blocked:  # each held back by its limits or a quota
        return lead[:-2]
    in_a_row = sum(m.silent for m in memory.values())
    beyond = now + timedelta(seconds=timing.max_block_s) if in_a_row >= SILENT_IN_A_ROW else now  # (read only then)
    if in_a_row >= SILENT_IN_A_ROW and any(memory[p].silent or (memory[p].blocked_until or now) > beyond for p in blocked):
        return lead + (f"{in_a_row} of the cluster's VMs in a row got capacity and were never usable: its image, startup "
                       "script or a region's network fails? (docs/how-to/operate.md); one VM is tried again when the block ends")
    refused = [p for p in blocked if p not in short and memory[p].quota_block.startswith("refused")]  # "stocked out"
    failed = [p for p in blocked if p not in short and p not in refused and memory[p].resize_failed]  # nor these
    held = {*short, *refused, *failed}
    queue = [(p, flex(p)) for p in blocked if p not in held]  # (asked once a pool)
    stocked, queued = [p for p, q in queue if not q], [p for p, q in queue if q]
    if not queued and not full and not held:
        return f"every allowed region is stocked out ({', '.join(stocked)}); probes are waiting for capacity"
    named = sorted({q for p in refused for q in memory[p].quota_block.partition(":")[2].split(",") if q})
    parts = ([f"Compute refused VMs for a quota (QUOTA_EXCEEDED{': ' + ', '.join(named) if named else ''}) in "
              f"{', '.join(refused)}"] if refused else []) + (
        [f"resizing the MIG failed in {', '.join(failed)} ({memory[failed[0]].resize_failed}); asked again when "
         "the block ends"] if failed else []) + (
        [f"stocked out: {', '.join(stocked)}"] if stocked else []) + (
        [f"flex-start request(s) still queued past their expected time in {', '.join(queued)}: waiting for a grant"]
        if queued else [])
    return lead + "; ".join(parts) if parts else lead[:-2]  # else a quota read holds each back


def silent_cleared(memory: dict[str, RegionMemory], booted: str, now: datetime, timing: Timing) -> list[Decision]:
    """A VM of ``booted`` became usable: the cluster's VMs can boot. The blocks ``silent_boot`` laid on pools whose own
    VMs never failed (ending later than any stockout's could) are lifted; a pool whose own VMs did not come up keeps
    its count and its block until one of its own boots (its region's fault, or it proves the fault gone)."""
    decisions, beyond = [], now + timedelta(seconds=timing.max_block_s)
    for pool, m in memory.items():
        if pool != booted and not m.silent and m.blocked_until is not None and m.blocked_until > beyond:
            memory[pool] = m.replaced(blocked_until=None)
            decisions.append(Decision(Action.UNBLOCK, pool, f"a VM in {booted} is usable: the cluster's VMs boot"))
    return decisions


def unseen_errors(errors: Iterable[MigError], memory: Mapping[str, RegionMemory]) -> defaultdict[str, list[MigError]]:
    """The creation errors of each of ``memory``'s pools that its memory has not seen yet (newer than its
    ``seen_errors_until``)."""
    unseen: defaultdict[str, list[MigError]] = defaultdict(list)
    for error in errors:
        if error.region in memory and ((seen := memory[error.region].seen_errors_until) is None or error.at > seen):
            unseen[error.region].append(error)
    return unseen


def booting(phases: Mapping[tuple[str, VmPhase], tuple[Vm, ...]], memory: Mapping[str, RegionMemory], now: datetime,
            timing: Timing, boot_s: Callable[[str], float], flex: Callable[[str], bool],
            heard_since: datetime | None = None) -> tuple[defaultdict[str, list[Vm]], defaultdict[str, list[Vm]], dict[str, float]]:
    """(stuck, healthy) booting VMs per pool, and when each that got capacity was first seen with it (epoch
    seconds, from the pool's memory, else now). Stuck: a capacity error; or, with capacity, not usable
    twice the pool's boot after it got it (within ``spill_after_s`` .. ``boot_timeout_s``), counted from when Zen
    could hear again after an outage of its own (``heard_since``: its agent's word waited in Pub/Sub, and healthy VMs
    were deleted as never usable, the cluster blocked as if its image failed); or, without, asked
    ``spill_after_s`` ago (a flex-start request: twice the pool's asked-to-usable time, at least that)."""
    stuck: defaultdict[str, list[Vm]] = defaultdict(list)  # (plain calls: a generic alias's costs a microsecond)
    healthy: defaultdict[str, list[Vm]] = defaultdict(list)
    spill_before, now_s = now - timedelta(seconds=timing.spill_after_s), now.timestamp()
    heard_s = heard_since.timestamp() if heard_since is not None else float("-inf")
    got: dict[str, float] = {}
    for (pool, phase), vms in phases.items():
        if phase is not VmPhase.BOOTING:
            continue
        seen = dict(zip(memory[pool].started, memory[pool].started_since)) if memory[pool].started else {}
        deadline_s = max(timing.spill_after_s, 2 * boot_s(pool))
        for vm in vms:
            if vm.started:
                got[vm.name] = seen.get(vm.name, now_s)
                late = now_s - max(got[vm.name], heard_s) >= min(timing.boot_timeout_s, deadline_s)
            else:
                late = vm.since <= (now - timedelta(seconds=deadline_s) if flex(pool) else spill_before)
            (stuck if vm.creation_error in CAPACITY_ERRORS or late else healthy)[pool].append(vm)
    return stuck, healthy, got


def _probe_order(vm: Vm) -> tuple[bool, datetime]:
    return vm.started, vm.since


def pruned(stuck: list[Vm], wanted: bool, got_s: Callable[[Vm], float], timing: Timing) -> tuple[list[Vm], list[Vm]]:
    """(kept, deleted) of a pool's stuck instances: the oldest still waiting for capacity is kept as the
    pool's probe while demand wants the pool (else the oldest that got capacity, for at most
    ``boot_timeout_s``); the others are deleted."""
    ordered = sorted(stuck, key=_probe_order) if len(stuck) > 1 else stuck  # (most pools: one)
    probe = bool(ordered) and (not ordered[0].started or got_s(ordered[0]) < timing.boot_timeout_s)
    keep = int(wanted and probe)
    return ordered[:keep], ordered[keep:]


def why_pruned(vm: Vm, age_s: float, got_s: Callable[[Vm], float], timing: Timing) -> str:
    """The reason a stuck instance :func:`pruned` deleted is deleted: one whose creation Compute refused for want
    of capacity is not "stuck booting for 0s", as it read before its spill time."""
    if vm.started:
        return f"not usable {got_s(vm):.0f}s after it got capacity"
    if vm.creation_error is not None and vm.creation_error in CAPACITY_ERRORS and age_s < timing.spill_after_s:
        return f"its creation failed ({vm.creation_error.value.lower()}); not needed as a probe"
    return f"stuck booting for {age_s:.0f}s; not needed as a probe"


def waiting(stuck: list[Vm]) -> list[Vm]:
    """A blocked pool's probes that may give their places: those still waiting for capacity (billed nothing)."""
    return [vm for vm in stuck if not vm.started]


def with_capacity(phases: Mapping[tuple[str, VmPhase], tuple[Vm, ...]], deleted: set[str]) -> int:
    """VMs not being deleted nor in ``deleted`` that got capacity: what ``min_vms`` keeps (a probe waiting for
    capacity, or a flex-start request in its queue, keeps no warm VM: counted, the cluster's one idle VM was
    deleted while a job waited on a stocked-out pool, and nothing replaced it)."""
    return sum(1 for (_, phase), group in phases.items() if phase is not VmPhase.DELETING for vm in group
               if vm.name not in deleted and (phase is not VmPhase.BOOTING or vm.started))


def min_missing(cluster: ClusterLimits, counted: int, stuck: Mapping[str, list[Vm]], going: int) -> int:
    """The VMs ``min_vms`` asks for: of the ``counted`` instances (listed or asked for), a probe waiting for capacity
    keeps no warm VM, nor one of the ``going`` VMs on their way out (drained, retired, deleted this pass: counted, the
    cluster's one VM drained while every delete failed stood for its warm VM, and none was asked); within ``max_vms``,
    which counts every instance until it is gone."""
    probing = sum(not vm.started for vms in stuck.values() for vm in vms)  # (those ``waiting``)
    return max(0, min(cluster.min_vms - (counted - probing - going), cluster.max_vms - counted))


def giving_way(probes: list[Vm], wanted: int, blocked_until: Callable[[Vm], datetime | None]) -> list[Vm]:
    """Of ``probes`` (those left after pruning), the ones whose places ``wanted`` jobs the cluster's
    ``max_vms`` holds take: those of the pools whose blocks end last first; a flex-start request's with all its
    waiting VMs (one of them deleted cancels it whole: only part of it planned, it was kept whole, and nothing
    moved)."""
    def ends(vm: Vm) -> float:
        until = blocked_until(vm)
        return until.timestamp() if until is not None else 0.0

    def request(vm: Vm) -> str:
        return vm.name.rpartition(PENDING_SEP)[0] if PENDING_SEP in vm.name else vm.name

    ordered = sorted(probes, key=lambda vm: (ends(vm), vm.name), reverse=True)
    chosen: list[Vm] = []
    for vm in ordered:
        if len(chosen) >= wanted:
            break
        if vm not in chosen:
            chosen += [other for other in ordered if request(other) == request(vm)]
    return chosen


def recovered_with(memory: Mapping[str, RegionMemory], recovered: Mapping[str, RegionMemory], ranking: Ranking,
                   unread: frozenset[str], errors: Mapping[str, list[MigError]], now: datetime,
                   vms: Iterable[Vm] = ()) -> dict[str, str]:
    """Blocked pools that a dearer pool of their region, blocked and delivering again now, speaks for ->
    that pool (``recovered``: each such pool's memory before this pass). A region's pools draw on its
    zones' capacity (a spot stockout and an on-demand one come from one shortage), so whichever pool's
    probe happens to get the returning capacity would take the rest of it at its price: a cheaper pool
    blocked now, since no later than the dearer pool was, is looked at again with it. Not: one blocked
    only after it (its shortage may be its own); one short of quota (the last quota read's
    ``quota_room``, a QUOTA error among this pass's ``errors``, or one of its ``vms`` listed with a QUOTA
    creation error, as Compute keeps it while it fails: quotas are per model, and not all are GPU quotas Zen
    reads; such a pool was asked again, refused again, and its jobs waited another pass); flex-start
    pools, either side (a queue is no stockout); pools whose MIG this pass could not read (``unread``);
    unpriced ones. ``ranking``: the pass's (prices, models)."""
    if not recovered:  # most passes: no dearer pool delivered again
        return {}
    price, flex = ranking.price, ranking.flex
    refused: set[str] | None = None  # read once a pool is a candidate: most passes have none
    out: dict[str, str] = {}
    for pool, m in memory.items():
        if (m.blocked_until is None or m.blocked_until <= now or m.last_stockout_at is None or pool in unread
                or flex(pool) or quotas.short(m, ranking.s.cluster.max_vms_per_region)
                or any(e.kind is ErrorKind.QUOTA for e in errors.get(pool, ()))):
            continue
        if refused is None:
            refused = {vm.region for vm in vms if vm.creation_error is ErrorKind.QUOTA}
        if pool in refused:
            continue
        for dearer, was in recovered.items():
            if (region_of(dearer) == region_of(pool) and price(pool) < price(dearer) < math.inf and not flex(dearer)
                    and was.last_stockout_at is not None and m.last_stockout_at <= was.last_stockout_at):
                out[pool] = dearer
                break
    return out
