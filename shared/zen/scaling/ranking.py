"""How Zen's planner ranks a cluster's pools for a demand group: expected seconds to a usable VM (the
region's learned boot, its stockout risk, the order of preference) and, where pools are priced, their
price within a slack of the fastest; plus which pools may hedge which. Part of ``zen.scaling.planner``.
Why, and the formulas: docs/explanations/scaling.md.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Callable

from zen.scaling import preemptions, quotas
from zen.scaling.model import ClusterSnapshot, DemandGroup, RegionMemory, Vm

_BOOT_WEIGHT = 0.3  # weight of a new boot in a region's moving-average boot time
RUN_UNKNOWN_S = 3600.0  # a run expected where none was learned nor named: egress is weighed against an hour's price


def learned_boot(memory: RegionMemory, booted: list[Vm], heard_since: datetime | None,
                 spill_after_s: float) -> float | None:
    """A pool's asked-to-usable seconds (``Ranking.boot_s``) with the VMs seen booting at the last plan and
    usable now folded into its moving average; not one asked before Zen could hear again after an outage of its own
    (``heard_since``): its agent's first word waited in Pub/Sub, and the outage was learnt as the pool's boot.
    A VM that waited for capacity past ``spill_after_s`` (a probe in a stockout, a recreated spot VM waiting for
    its place) counts from when a pass first saw it get capacity (``RegionMemory.started_since``), and not at all
    where none did: that wait is the stockout's, which the pool's risk weighs (``Ranking.risk``, decaying); counted
    from the ask, a probe that waited out a two-hour stockout put its pool's boot at 37 minutes, ranked behind the
    others long after, and, asked no more, the pool never learnt better."""
    asked, got = dict(zip(memory.booting, memory.booting_since)), dict(zip(memory.started, memory.started_since))
    average, heard_s = memory.boot_s, heard_since.timestamp() if heard_since is not None else float("-inf")
    for vm in booted:
        end, start = vm.since.timestamp(), asked.get(vm.name)
        if start is None or start < heard_s:  # not seen booting, or booting across an outage of Zen's
            continue
        if end - start > spill_after_s:  # it may have waited for capacity
            if (got_s := got.get(vm.name)) is None:  # no pass saw it get capacity: its wait and boot are one
                continue
            start = got_s if got_s - start > spill_after_s else start  # it waited: from its capacity
        seconds = end - start
        if seconds <= 0:  # the phase's start is not the boot's end (e.g. a VM known busy from the start)
            continue
        average = seconds if average is None else (1 - _BOOT_WEIGHT) * average + _BOOT_WEIGHT * seconds
    return average


class Ranking:
    """The pools' ranks during one pass. ``memory`` is the pass's (``learn`` updates it in place before
    anything is ranked); ``blocked`` says whether a pool is blocked now."""

    def __init__(self, snapshot: ClusterSnapshot, memory: dict[str, RegionMemory], blocked: Callable[[str], bool]):
        self.s, self.memory, self._blocked = snapshot, memory, blocked
        self.now: datetime = snapshot.now
        self.timing = snapshot.timing
        self.order = {r: i for i, r in enumerate(snapshot.cluster.regions)}
        self._ranks: dict[tuple[tuple[str, ...], bool, float | None, float | None, tuple[float, ...]], list[str]] = {}
        pools = snapshot.cluster.pools or {}  # (None: each key a region of one unpriced model, ``ClusterLimits.pool``)
        self.priced = any(p.usd_per_hour is not None for p in pools.values())
        self._flex = {key for key, p in pools.items() if p is not None and p.model == "flex-start"}  # a pass asks many times
        self._cluster_steps: dict[str, int] | None = None  # made when first needed (:meth:`_region_steps`)

    def boot_s(self, region: str) -> float:
        """Asked-to-usable seconds in a pool: learned, else the estimate. A flex-start pool's is its estimate
        (``flex_start_estimate_s``), never learned: in production a granted request's VMs appear under new
        names (not its pending ones), so what could be learned is the grant-to-usable time alone, without the
        queue; counted so, a request still queued a few minutes later was taken for stuck."""
        if self.flex(region):  # what its memory holds is not read
            return self.timing.flex_start_estimate_s
        learned = self.memory[region].boot_s
        return self.timing.boot_estimate_s if learned is None else learned

    def flex(self, pool: str) -> bool:
        """A flex-start pool: grown by resize requests granted whole, after a queue (no stockouts)."""
        return pool in self._flex

    def risk(self, region: str) -> float:
        """How likely a VM asked here now does not come up in time (0..1): 0 without a stockout, else
        decaying from 1 with its age (halved once the region delivered after it). See :meth:`uncertain`."""
        memory = self.memory[region]
        if memory.last_stockout_at is None:
            return 0.0
        age = (self.now - memory.last_stockout_at).total_seconds()
        risk = math.exp(-max(0.0, age) / self.timing.trust_s)
        delivered_since = memory.last_boot_at is not None and memory.last_boot_at > memory.last_stockout_at
        return risk / 2 if delivered_since else risk

    def uncertain(self, region: str) -> bool:
        """Worth a hedge: never seen to deliver, or its risk is at least ``hedge_risk``."""
        return self.memory[region].last_boot_at is None or self.risk(region) >= self.timing.hedge_risk

    def spares(self, pool: str) -> bool:
        """Whether a gang (or a job, :meth:`races_spare`) asked for in ``pool`` may get a spare boot
        (``zen.scaling.gangs``): yes, but in a flex-start pool, whose grants come whole after a queue (no race
        between boots to win)."""
        return not self.flex(pool)

    def races_spare(self, regions: tuple[str, ...], pool: str) -> bool:
        """Whether a one-VM job asked for in ``pool`` gets a spare boot there too, and starts at the first of
        the two (the loser ends when Compute lists the winner RUNNING, unbilled if it is not RUNNING yet,
        else after a minute or so billed): where pools are priced (a boot racing in the same pool costs no
        more an hour, unlike a hedge in a costlier one), spares are allowed (:meth:`spares`), the last GPU
        quota read left room for a region's worth of VMs (``zen.scaling.quotas.short``), and none of the
        job's pools is blocked (a spare takes a place, and places are what stockouts leave short).
        ``scaling.spare_boots: false`` turns them off. Why and what it buys:
        docs/explanations/scaling.md#prices-provisioning-models-and-preemptions."""
        return (self.timing.spare_boots and self.s.cluster.pool(pool).usd_per_hour is not None and self.spares(pool)
                and not quotas.short(self.memory[pool], self.s.cluster.max_vms_per_region)
                and not any(self._blocked(r) for r in regions if r in self.memory))

    def rank(self, regions: tuple[str, ...], patient: bool = True, within_s: float | None = None,
             checkpoint_every_s: float | None = None, egress_h: tuple[float, ...] = ()) -> list[str]:
        """Allowed, unblocked pools, best first. By expected seconds to a usable VM (boot, stockout risk,
        one ``preference_s`` per step down the region order; of equal ones, the lower price first, then the cluster's
        order: past its start bound a job was put on standard beside spot as fast); where pools are priced and the demand is
        ``patient``, the pools expected within ``cost_slack_s`` of the fastest, or within ``within_s`` from now (what
        is left of a bound the jobs named; None: no such bound), come first, cheapest first (the rest after, fastest
        first). ``egress_h``: what the demand's inputs cost read in each of ``regions`` (in their order), in USD per
        hour of its expected run (:meth:`egress_h`), added to each pool's price where pools are priced; () none.
        Computed after ``learn``, the only step that changes its inputs."""
        # Unpriced, patience, slack, checkpoints and egress change nothing: one ranking per pool list.
        key = (regions, patient, within_s, checkpoint_every_s, egress_h) if self.priced else (
            regions, True, None, None, ())
        ranked = self._ranks.get(key)
        if ranked is None:
            usable = [r for r in regions if r in self.memory and not self._blocked(r)]
            # The job's own order (data locality first, zen.core.locality) where it is not the cluster's.
            known = [r for r in regions if r in self.order]  # a group may name regions the cluster dropped
            order = self.order if known == sorted(known, key=self.order.__getitem__) else {
                r: i for i, r in enumerate(known)}
            step = self._region_steps(known, order)
            eta = {r: self.boot_s(r) + self.risk(r) * self.timing.spill_after_s + step[r] * self.timing.preference_s
                   for r in usable}
            extra = dict(zip(regions, egress_h))  # (none: every pool's price as it is, not + 0.0)
            ranked = sorted(usable, key=lambda r: (  # equally fast: the lower price (and egress) first, late too
                eta[r], self.price(r) + extra[r] if extra else self.price(r) if self.priced else 0.0, order[r]))
            if patient and self.priced and ranked:
                horizon = eta[ranked[0]] + self.timing.cost_slack_s  # seconds from now, as ``eta`` and ``within_s``
                if within_s is not None:  # a named bound widens the choice to what is expected within it
                    horizon = max(horizon, within_s)
                soon = [r for r in ranked if eta[r] <= horizon]
                ranked = sorted(soon, key=lambda r: (  # by cost with preemptions (dearer runs) and egress
                    self.cost(r, checkpoint_every_s) + extra[r] if extra else self.cost(r, checkpoint_every_s), eta[r],
                    order[r])) + ranked[len(soon):]
            self._ranks[key] = ranked
        return ranked

    def _region_steps(self, known: list[str], order: dict[str, int]) -> dict[str, int]:
        """Each pool's step down the order of regions, the cluster's or a job's own (a region's pools share
        it: models are no step)."""
        if order is self.order:  # a pool's step down the cluster's order of regions
            if self._cluster_steps is None:
                of = {key: self.s.cluster.pool(key).region for key in self.s.cluster.regions}
                steps: dict[str, int] = {}
                for region in of.values():
                    steps.setdefault(region, len(steps))
                self._cluster_steps = {key: steps[region] for key, region in of.items()}
            return self._cluster_steps
        regions: dict[str, int] = {}
        for r in sorted(known, key=order.__getitem__):
            regions.setdefault(self.s.cluster.pool(r).region, len(regions))
        return {r: regions[self.s.cluster.pool(r).region] for r in known}

    def cost(self, pool: str, checkpoint_every_s: float | None = None) -> float:
        """USD per useful VM-hour expected in ``pool`` for jobs that save their work every
        ``checkpoint_every_s`` (None: never): its price times what its preemptions were seen to throw away
        and re-boot against the time its VMs ran (``zen.scaling.preemptions``; 1 where none were)."""
        factor = preemptions.cost_factor(self.memory[pool], checkpoint_every_s, self.boot_s(pool),
                                         self.now.timestamp(), self.timing.trust_s)
        return self.price(pool) * factor

    def price(self, pool: str) -> float:
        """USD per VM-hour in ``pool``; unpriced pools rank after every priced one."""
        usd = self.s.cluster.pool(pool).usd_per_hour
        return math.inf if usd is None else usd

    def prices_compared(self, pool: str, ranked: list[str] | tuple[str, ...], group: DemandGroup | None = None,
                        shown: int = 3) -> str:
        """``: $2.37/h (spot), before us-west1 $2.96/h (standard), ...``: a priced choice's reason names the
        prices it was compared with, as ``group``'s ranking weighed them: the next pools ranked after it and any
        cheaper one after those (one cheaper ranked after it is "slower": beyond the slack, or the group was past
        its start bound, "fastest first"), those ranked before it that had no room, and a price whose preemptions
        were seen to throw work away at what that makes it per useful hour (what it was ranked by), and where its
        jobs' inputs were priced (:meth:`egress_h`) the egress from each pool's region, over the run expected.
        Empty where nothing is priced."""
        if not self.priced:
            return ""
        patient = group is None or self.patient(group)
        checkpoint = None if group is None else group.checkpoint_every_s
        extra = dict(zip(group.regions, self.egress_h(group))) if group is not None else {}
        egress = dict(group.egress) if group is not None and extra else {}

        def total(p: str) -> float:  # what it was ranked by: USD per useful hour, with the egress over the run
            return self.cost(p, checkpoint) + extra.get(p, 0.0)
        mine = total(pool)

        def usd(p: str, after: bool = False) -> str:
            price, model, expected = self.price(p), self.s.cluster.pool(p).model, self.cost(p, checkpoint)
            if math.isinf(price):
                return f"unpriced ({model})"
            weighed = f"; ${expected:.2f}/h with its preemptions" if expected > price * 1.005 else ""
            moved = f" + ${egress.get(self.s.cluster.pool(p).region, 0.0):.2f} egress" if egress else ""
            return f"${price:.2f}/h ({model}{weighed}{', slower' if after and total(p) < mine else ''}){moved}"
        at = ranked.index(pool) if pool in ranked else 0
        full, others = ranked[:at][:shown], list(ranked[at + 1:at + 1 + shown])
        others += [p for p in ranked[at + 1 + shown:] if total(p) < mine][:shown]  # cheaper, slower
        text = f": {usd(pool)}" + ("" if patient else ", fastest first (past its start bound)")
        if egress and group is not None:
            text += f" (its inputs' egress weighed against an expected {self.run_s(group) / 3600:.1f} h run)"
        if full:
            text += f", after {', '.join(f'{p} {usd(p)}' for p in full)} with no room"
        return text + (f", before {', '.join(f'{p} {usd(p, True)}' for p in others)}" if others else "")

    def cold_start_s(self, pool: str) -> float:
        """What a cold start costs, in seconds of an idle VM of ``pool`` (the price ski rental weighs keeping it
        against, ``keep_factor`` x): a new boot where the next job would be asked for now (the pools ranked for the
        cluster, best first), at that pool's price, and where that pool costs more per useful hour than ``pool``
        (its price, its preemptions) the difference over a job's run as ``pool`` learned it (``RegionMemory.run_s``).
        Unpriced, free (a price of 0), or ranked first itself: its own boot."""
        own = self.boot_s(pool)
        ranked = self.rank(tuple(self.s.cluster.regions))
        if not self.priced or not ranked or ranked[0] == pool or not 0 < self.price(pool) < math.inf:
            return own  # unpriced or free: what a VM of it costs idle is not dollars
        best, mine = ranked[0], self.cost(pool)
        theirs = self.cost(best)
        if math.isinf(theirs):
            return own
        run_s = self.memory[pool].run_s or 0.0
        return (self.boot_s(best) * self.price(best) + max(0.0, theirs - mine) * run_s) / self.price(pool)

    def hedge_priced(self, pool: str, first: str) -> bool:
        """Whether ``pool`` may hedge a boot asked in ``first``: the hedge may win and run the job, so it
        costs at most ``hedge_price_ratio`` x the first choice's price (unpriced: any)."""
        return not self.priced or self.price(pool) <= self.timing.hedge_price_ratio * self.price(first)

    def for_group(self, group: DemandGroup) -> list[str]:
        """:meth:`rank` for a demand group: patient while within its start bound; a group that named its
        own bound (``max_wait_s``) may take any pool expected within what is left of it, cheapest first
        (a flex-start pool's queue included); every patient group, any within ``cost_slack_s`` of the fastest."""
        patient = self.patient(group)
        within = None  # what is left of the bound its oldest job named
        if patient and group.max_wait_s is not None:
            within = group.max_wait_s - (self.now - group.oldest).total_seconds()
        return self.rank(group.regions, patient, within, group.checkpoint_every_s, self.egress_h(group))

    def egress_h(self, group: DemandGroup) -> tuple[float, ...]:
        """What one of ``group``'s VMs' jobs costs in egress read in each of its pools (``DemandGroup.egress``), in USD
        per hour of its expected run (:meth:`run_s`), so that a pool's price plus it orders pools as the dollars of
        the whole run do; () where pools are unpriced or its jobs name no input of a known location."""
        if not self.priced or not group.egress:
            return ()
        usd, hours = dict(group.egress), self.run_s(group) / 3600
        return tuple(usd.get(self.s.cluster.pool(p).region, 0.0) / hours for p in group.regions)

    def run_s(self, group: DemandGroup) -> float:
        """A run of ``group``'s jobs, as expected: the mean of the runs its pools learned (``RegionMemory.run_s``),
        else the longest ``max_runtime_s`` its jobs named, else ``RUN_UNKNOWN_S``."""
        learned = [run for p in group.regions if p in self.memory and (run := self.memory[p].run_s)]
        return sum(learned) / len(learned) if learned else group.longest_s or RUN_UNKNOWN_S

    def patient(self, group: DemandGroup) -> bool:
        """Whether a group may still wait for its cheapest pools: its oldest job has waited less than its
        start bound (``max_wait_s``, else ``Timing.max_start_wait_s``). Past it, speed ranks first."""
        bound = self.timing.max_start_wait_s if group.max_wait_s is None else group.max_wait_s
        return (self.now - group.oldest).total_seconds() < bound
