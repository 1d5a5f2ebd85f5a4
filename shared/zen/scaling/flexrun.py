"""Flex-start pools as the planner sees them: the end of a VM's run, and resize requests cancelled whole.

The end of a flex-start VM's run, as the planner counts supply. GCE deletes a flex-start VM
``flex_start_run_s`` after it is RUNNING; a claim of a job whose ``max_runtime_s``, and the margin kept after it for
its upload (``deadlines.flex_end_margin_s``), outlast what is left of that run is refused (``zen.jobs.claims``, cause
``flex-ending``), both by ``zen.core.provisioning.flex_too_short``.
So an idle flex-start VM whose run ends first is no supply for a demand group holding such a job: the
planner hides it from that group while matching (:func:`hidden`), asks for a VM the job can take, and the
old VM, needed by no other group, is scaled down as any idle VM is. Counted by the group's longest job (its
jobs are counted together, ``DemandGroup.longest_s``): a group mixing short and long jobs gets no such VM
for any of them, at worst a VM more than needed while the old one lasts.

A request's VMs wait under pending names (``<MIG>+<request>+<n>``, ``zen.adapters.flex_start``) and deleting
any of them cancels the whole request: :func:`keep_requests_whole` keeps a request the plan would cancel in
part, whatever step planned it (a stuck request whose oldest VM stays as its pool's probe, ``prune_stuck``; a
VM that lost its race while the others are wanted, ``cancel_losers``): asked again, they would queue from the
back. A blocked pool's requests no waiting job could take are counted for ``cancel_losers`` too (:func:`unneeded`).
A granted request's VMs join the MIG under new names, first seen at the grant: their race counts from the request's
ask (:func:`asked_at`).
"""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import Callable, Collection, Iterable, Iterator, Mapping

from zen.core.provisioning import PENDING_SEP, flex_run_left_s, flex_too_short
from zen.scaling.model import Action, ClusterLimits, Decision, DemandGroup, Plan, RegionMemory, Timing, Vm, VmIndex


def run_ends_first(vm: Vm, longest_s: float, run_s: float, timing: Timing, now: datetime) -> bool:
    """Whether flex-start VM ``vm``'s run ends before a job of ``longest_s`` seconds and the margin after it
    (``timing.flex_end_margin_s``) would (the claims' rule)."""
    if vm.first_heard_at is None:  # its agent has not spoken: the VM asked for the job
        return False
    left = flex_run_left_s(run_s, now, vm.first_heard_at, vm.running_at, timing.boot_estimate_s)
    return flex_too_short(left, longest_s, timing.flex_end_margin_s)


def ends_before(vm: Vm, longest_s: float | None, cluster: ClusterLimits, timing: Timing, now: datetime) -> bool:
    """Whether ``vm`` is a flex-start VM of ``cluster`` whose run ends before a job of ``longest_s`` would
    (None: a job that named no bound, held to the margin alone, as its claim is: ``zen.jobs.claims.flex_run_left``).
    Its model is the one a scaling pass recorded for it, else its pool's, as the claim reads it: a primary MIG keeps
    its name when the cluster's models are reordered or flex-start leaves them, and its VMs booted as flex-start stay
    so until their runs end (taken for its pool's model, one was the supply of a job whose claim it refused)."""
    return (cluster.flex_run_s is not None and cluster.pools is not None
            and (vm.model or cluster.pool(vm.region).model) == "flex-start"
            and run_ends_first(vm, longest_s or 0, cluster.flex_run_s, timing, now))


def ending(cluster: ClusterLimits, timing: Timing, now: datetime) -> Callable[[Vm, float | None], bool]:
    """:func:`ends_before` for ``cluster`` now: where VMs run several jobs, the room a busy one has is none for
    a job it would refuse (``zen.scaling.sharing.absorb``'s ``ends``)."""
    return lambda vm, longest_s: ends_before(vm, longest_s, cluster, timing, now)


def foreign(vm: Vm, cluster: ClusterLimits) -> bool:
    """Whether a scaling pass recorded ``vm`` as another model than its pool's as configured now (a primary MIG's spot
    VM after its cluster's models were narrowed to standard): a job accepting the pool's model only refuses it."""
    return cluster.pools is not None and vm.model is not None and vm.model != cluster.pool(vm.region).model


def hidden(counts: dict[str, int], group: DemandGroup, idle: Mapping[str, tuple[Vm, ...]], cluster: ClusterLimits,
           timing: Timing, now: datetime, took: dict[tuple[str, str], int] | None = None) -> AbstractContextManager[None]:
    """Within the block, ``counts`` (idle VMs left per pool) without the idle VMs of ``group``'s pools its jobs
    refuse: flex-start ones whose run ends before its longest job would (a group with no ``longest_s``: within the
    margin of its end), and, for a group whose jobs accept one model only, those a scaling pass recorded as another
    (a primary MIG's spot VM after its cluster's models were reordered or narrowed: counted as a standard-only job's,
    no VM was asked for the job, and the VM, every claim of the job's refused, was kept idle for it, billed, while
    it waited); given back after. Nothing where none of those idle VMs is such a one, or for a cluster without run
    length (the simulator's) and a group accepting any model: then no generator is made to give nothing back (a
    pass makes one or two per demand group). ``took``: (pool, model) -> the idle VMs groups accepting that model only
    took, added to in the block; (pool, ``ANY_TOOK``) -> those of its VMs recorded as another model than its pool's
    (:func:`foreign`) the groups of any model were counted as taking, first, of those they do not refuse: the VMs a
    one-model group refuses that such groups took before are not hidden twice (a group of any model queued earlier
    left the standard VM beside a spot one to a standard-only group after it, which had a standard VM asked for,
    billed, while one stood idle). A VM those groups refuse too (a flex-start VM near its run's end) is none they
    took: counted so, it was a standard-only job's VM, no VM was asked for it, and its claims on it were refused."""
    hide: dict[str, int] = {}
    accepts, usable = group.accepts, dict[str, int]()  # usable: a group of any model's foreign VMs it may take
    for pool in group.regions if (cluster.flex_run_s is not None or accepts is not None
                                  or took is not None and cluster.pools is not None) else ():  # else none
        if not counts.get(pool):
            continue
        vms = idle.get(pool, ())
        refused = sum(  # (a VM's recorded model, not its pool's: ends_before)
            (accepts is not None and vm.model is not None and vm.model != accepts)
            or ends_before(vm, group.longest_s, cluster, timing, now) for vm in vms)
        if took is not None and accepts is None and any(foreign(vm, cluster) for vm in vms):
            usable[pool] = sum(foreign(vm, cluster) and not ends_before(vm, group.longest_s, cluster, timing, now)
                               for vm in vms)
        elif took is not None and refused and accepts is not None and (others := sum(
                vm.model is not None and vm.model != accepts for vm in vms)):
            refused -= min(others, took.get((pool, ANY_TOOK), 0))  # (taken by the groups of any model)
        if (take := min(refused, counts[pool])) > 0:
            hide[pool] = take
            counts[pool] -= take
    if took is not None and (accepts is not None or usable):
        return _given_back(counts, hide, took, {pool: counts.get(pool, 0) for pool in (usable or group.regions)},
                           accepts or ANY_TOOK, usable)
    return _given_back(counts, hide) if hide else _NOTHING_HIDDEN


ANY_TOOK = ""  # ``took``'s model for the foreign VMs groups of any model were counted as taking (:func:`hidden`)


_NOTHING_HIDDEN = nullcontext()


@contextmanager
def _given_back(counts: dict[str, int], hide: dict[str, int], took: dict[tuple[str, str], int] | None = None,
                start: Mapping[str, int] = {}, accepts: str = ANY_TOOK, usable: Mapping[str, int] = {}) -> Iterator[None]:
    """Within the block ``counts`` stay without ``hide``; given back after. ``took``: the VMs taken in the block
    from ``start`` (each pool's count at its start) added up, under (pool, ``accepts``); for a group of any model
    (``ANY_TOOK``), as many of them as the foreign VMs it may take (``usable``) not counted as taken before."""
    try:
        yield
    finally:
        for pool, count in start.items():
            if took is not None and (taken := count - counts.get(pool, 0)) > 0:
                had = took.get((pool, accepts), 0)
                took[pool, accepts] = had + (taken if accepts != ANY_TOOK else min(taken, max(0, usable[pool] - had)))
        for pool, take in hide.items():
            counts[pool] += take


def kept_for(idle: Iterable[Vm], took: Mapping[tuple[str, str], int]) -> set[str]:
    """The idle VMs (names; ``idle`` in the planner's order of deletion) kept for the groups accepting one model that
    took them (``took``, as :func:`hidden` adds it up): of each pool, as many of that model's as they took, the last
    in that order. Counted by pool alone, the one idle longest went as a spare: the standard VM beside a spot one a
    standard-only job's claims refuse, which was kept, billed, while the job waited for a new VM."""
    kept: set[str] = set()
    for (pool, accepts), count in took.items() if took else ():
        if accepts == ANY_TOOK:  # (foreign VMs groups of any model took: scaled down first, any VM serves those)
            continue
        fit = [vm.name for vm in idle if vm.region == pool and vm.name not in kept
               and (vm.model is None or vm.model == accepts)]
        kept.update(fit[max(0, len(fit) - count):])
    return kept


class Queued(dict[str, int]):
    """Per flex-start pool, the VMs that stand for a resize request still queued (no VM yet: not granted), and
    each request's size (``sizes``). A demand group past its start bound that may take another pool is covered
    by none of them (``ZenPlanner._cover``): a pending request kept such a job waiting until it counted as stuck
    (2 x ``flex_start_estimate_s`` after the ask), up to 17 minutes past the bound, while a costlier model it
    accepts had capacity. A gang counts one request at most (:meth:`for_gang`): each is granted whole, on its
    own, so a gang covered by another job's request of 1 and asked the rest got its VMs from two grants, and the
    first VM booted, billed, for a gang that could not start."""

    def __init__(self, vms: Mapping[str, Iterable[Vm]]) -> None:
        self.sizes: dict[str, list[int]] = {}
        for pool, pool_vms in vms.items():
            requests = Counter(vm.name.rpartition(PENDING_SEP)[0] for vm in pool_vms if PENDING_SEP in vm.name)
            self.sizes[pool] = sorted(requests.values())
        super().__init__({pool: sum(sizes) for pool, sizes in self.sizes.items()})

    def for_gang(self, pool: str, pending: int, rest: int, late: bool) -> int:
        """How many of ``pool``'s ``pending`` VMs a gang that needs ``rest`` of them may count: those granted
        (booting), and where they are too few one queued request that holds the rest (none for a gang ``late``,
        past its bound with another pool to take)."""
        if not self.sizes.get(pool):
            return pending  # no request queued there (or not a flex-start pool)
        granted = self._granted(pool, pending)
        one = next((size for size in self.sizes[pool] if size >= rest - granted), None)
        return min(pending, granted if late or rest <= granted or one is None else granted + one)

    def used(self, pool: str, pending: int, taken: int) -> None:
        """A gang took ``taken`` of ``pool``'s ``pending`` VMs as :meth:`for_gang` counted them: of the request it
        counted, what it took is its own now (the rest of a larger one stays queued, and counted so)."""
        granted = self._granted(pool, pending)
        if taken > granted and (size := next((s for s in self.sizes.get(pool, ()) if s >= taken - granted), None)):
            self.sizes[pool].remove(size)
            if left := size - (taken - granted):
                self.sizes[pool] = sorted([*self.sizes[pool], left])
            self[pool] -= taken - granted

    def _granted(self, pool: str, pending: int) -> int:
        """Of ``pool``'s ``pending`` VMs, those granted (booting): not its queued requests'."""
        return max(0, pending - self.get(pool, 0))


def claim_queued(flex: bool, pool: str, left: int, pending: dict[str, int], booting_left: dict[str, int]) -> int:
    """How many of ``left`` jobs a demand group about to ask in ``pool`` takes from the requests queued there
    that no group took (``pending``: the planner's booting VMs left after matching; a flex-start pool's are its
    requests' VMs), counted off ``pending`` and ``booting_left`` (so none is cancelled as unwanted). Only a group
    past its start bound leaves them (:class:`Queued`), for another pool it may take; where it asks in this one
    all the same (the others blocked or full), a new request would queue behind its own, one more every pass,
    each a VM a grant bills (eight for one job in the reproduction)."""
    if not flex or (take := min(left, pending.get(pool, 0))) <= 0:
        return 0
    pending[pool] -= take
    booting_left[pool] -= take
    return take


def unneeded(running: dict[str, int], pending: dict[str, int], healthy: Mapping[str, list[Vm]],
             blocked: Callable[[str], bool], flex: Callable[[str], bool],
             uncovered: Iterable[tuple[DemandGroup, int]]) -> dict[str, int]:
    """Per pool, the booting VMs no queued job needs once the match is done (``running`` and ``pending`` left), and
    a blocked flex-start pool's requests beyond the jobs left that could take them: those of the groups allowing the
    pool that the match left uncovered (asked elsewhere meanwhile: the request is their hedge). A blocked pool covers
    nothing (``ZenPlanner.match``), so its requests were counted as needed by none and cancelled by none: a job
    stopped or started elsewhere left its request queued until the block ended or the request counted as stuck
    (2 x ``flex_start_estimate_s``), and a grant meanwhile booted a VM, billed, for nobody."""
    left = {pool: running[pool] + pending[pool] for pool in running}
    for pool, vms in healthy.items():
        if vms and pool in left and blocked(pool) and flex(pool):
            left[pool] = max(0, len(vms) - sum(jobs for group, jobs in uncovered if pool in group.regions))
    return left


def kept_whole(plan: Plan, index: VmIndex) -> set[str]:
    """The deletions of ``plan`` that ``keep_requests_whole`` leaves: real VMs, and flex-start requests deleted whole."""
    planned = {name for _, name in plan.delete}
    if not any(PENDING_SEP in name for name in planned):
        return planned  # no flex-start request's VM among them
    return {name for pool, name in plan.delete if PENDING_SEP not in name or not any(
        vm.name.rpartition(PENDING_SEP)[0] == name.rpartition(PENDING_SEP)[0] and vm.name not in planned
        for vm in index.region(pool))}


def keep_requests_whole(plan: Plan, index: VmIndex) -> None:
    """Take out of ``plan``'s deletions the pending VMs of a flex-start request whose other pending VMs the plan
    keeps (its decisions then say so): deleting one would cancel them all. Real VMs, and requests deleted
    whole, are left as planned."""
    split = {name for _, name in plan.delete} - kept_whole(plan, index)
    if not split:
        return
    plan.delete[:] = [(pool, name) for pool, name in plan.delete if name not in split]
    plan.decisions[:] = [Decision(Action.HOLD, d.region, f"kept: its flex-start request's other VMs are kept, and a "
                                  f"request is cancelled whole (planned: {d.reason})", vm=d.vm)
                         if d.action is Action.DELETE and d.vm in split else d for d in plan.decisions]


def asked_at(memory: RegionMemory, booting: Iterable[Vm], listed: Collection[str]) -> dict[str, float]:
    """Of a flex-start pool's ``booting`` VMs, those asked for before they were first seen: when (epoch seconds; the
    others' ask is their ``since``). A granted request's VMs join the MIG under new names, first seen at the grant:
    taken for boots asked then, the VMs of a request that lost its race (asked with the winner for the same job,
    granted before a pass cancelled it) were kept booting, then idle, for no job, where another pool's loser is
    deleted at once (``ZenPlanner.cancel_losers``). A VM the last plan saw booting: as it remembered
    (``RegionMemory.booting_since``); one new since: when the latest of the requests the last plan saw queued, and
    no longer ``listed``, was asked."""
    remembered = dict(zip(memory.booting, memory.booting_since))
    granted = max((at for name, at in remembered.items() if PENDING_SEP in name and name not in listed), default=None)
    asked = {}
    for vm in booting:
        at = remembered.get(vm.name, granted if PENDING_SEP not in vm.name and vm.name not in memory.known else None)
        if at is not None and at < vm.since.timestamp():
            asked[vm.name] = at
    return asked
