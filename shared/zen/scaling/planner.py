"""Zen's scaling planner: ``ZenPlanner().plan(snapshot) -> Plan``. Pure: no I/O, time from the snapshot.

A pass works on demand aggregated by (priority, allowed regions), never on single jobs, so it costs
O(groups x regions) however long the queue is. Per cluster it learns from what happened since the last
plan (boots, stockouts, stuck boots), ranks the unblocked regions, matches demand to idle and healthy
booting VMs, asks for VMs (spare boots in priced pools, hedges in uncertain ones), cancels the boots that
lost their race, keeps one free probe per blocked pool (``zen.scaling.probes``; at ``max_vms``, probes give
their places to pools not stocked out), keeps idle VMs like ski rental; each decision carries a reason.
Why, the formulas and defaults: docs/explanations/scaling.md; measured: docs/benchmarks/simulator.md."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from functools import partial

from zen.scaling import flexrun, gangs, preemptions, probes, quotas, releasing
from zen.scaling.ranking import Ranking, learned_boot
from zen.scaling.model import Action, ClusterSnapshot, Decision, DemandGroup, Plan, RegionMemory, Vm, VmPhase, vm_index

_FRESH = RegionMemory()  # a region without memory yet (frozen: one shared value)
_with = RegionMemory.replaced  # _with(memory, **changes): dataclasses.replace, faster


class ZenPlanner:
    name = "zen"
    routes_by_data = True  # Zen's job service narrows data jobs' starts (zen.core.routing); the simulator models it
    # A racing VM's first word runs a pass (production: Zen.on_heartbeat; the simulator: first_word_s).
    hears_running = True

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        return _Planning(snapshot).run()


class _Planning:
    """One planning pass; holds the working state so each step stays small."""

    def __init__(self, snapshot: ClusterSnapshot):
        self.s, self.now, self.timing, self.regions = snapshot, snapshot.now, snapshot.timing, snapshot.cluster.regions
        self.index = index = vm_index(snapshot.vms)  # kept while the manager hands over the same VMs
        self.memory = quotas.remember({r: snapshot.memory.get(r, _FRESH) for r in self.regions}, snapshot.quota_room,
                                      index.by_region)  # a quota read this pass: remembered for every instance
        self.ranking = ranking = Ranking(snapshot, self.memory, self._blocked)
        self.rank, self.boot_s, self.uncertain = ranking.rank, ranking.boot_s, ranking.uncertain
        self.patient, self.hedge_priced = ranking.patient, ranking.hedge_priced
        self.plan, self.by_region = Plan(), index.by_region
        self.idle = defaultdict(tuple, {r: v for (r, phase), v in index.phases.items() if phase is VmPhase.IDLE})
        self.alive = index.alive  # not being deleted (the last VM to become usable: index.latest_win, when asked)
        # Booting VMs: stuck (a capacity error, or late) or healthy; when each started one first had capacity.
        self.stuck, self.healthy, self.got = probes.booting(index.phases, self.memory, self.now, self.timing,
                                                            self.boot_s, ranking.flex, snapshot.heard_since)
        self.asked: dict[str, float] = {}  # a flex VM's ask, if earlier
        for r in self.regions:
            if ranking.flex(r) and self.healthy[r]:
                self.asked.update(flexrun.asked_at(self.memory[r], self.healthy[r], set(index.names(r))))
        self._blocked_after_learn: set[str] | None = None  # blocked regions, fixed once ``learn`` is done
        self.groups = sorted(snapshot.demand_groups(), key=lambda g: (-g.priority, g.oldest, g.regions))
        self.spares = gangs.SpareBoots(ranking.spares, ranking.uncertain)  # spare boots; gangs' racing copies
        self.at_limit, self.places_wanted = 0, 0  # VMs jobs and gangs held for max_vms alone need; places left
        self.idle_needed = defaultdict[str, int](int)
        self.took = dict[tuple[str, str], int]()  # flexrun.hidden
        self._ending = partial(flexrun.hidden, idle=self.idle, cluster=snapshot.cluster, timing=self.timing,
                               now=self.now, took=self.took)

    def _age(self, vm: Vm) -> float:
        return (self.now - vm.since).total_seconds()

    def _got_s(self, vm: Vm) -> float:  # seconds since a started VM was first seen with capacity
        return self.now.timestamp() - self.got[vm.name]

    def _blocked(self, region: str) -> bool:
        if self._blocked_after_learn is not None:
            return region in self._blocked_after_learn
        return (until := self.memory[region].blocked_until) is not None and until > self.now

    def _decide(self, action: Action, region: str | None, reason: str, count: int = 0, vm: str | None = None) -> None:
        self.plan.decisions.append(Decision(action, region, reason, count, vm))

    def _strike(self, region: str, why: str, **cause: str) -> None:
        if self._blocked(region):
            return  # already blocked for this episode; the probe will tell us when it ends
        self.memory[region], decision = probes.strike(self.memory[region], region, why, self.now, self.timing, **cause)
        self.plan.decisions.append(decision)

    # -- steps ---------------------------------------------------------------------------------
    def learn(self) -> None:
        self.plan.decisions += quotas.lift(self.memory, self.s.quota_room, self.now, self.s.unread)
        new_errors = probes.unseen_errors(self.s.errors, self.memory)
        recovered: dict[str, RegionMemory] = {}  # pools blocked before that delivered now: their memory then
        for region in self.regions:
            memory = self.memory[region]
            # Booted since the last plan: booting then, or new and usable (none if nothing booted and its VMs are as
            # then).
            booted, names = [], self.index.names(region)
            if memory.booting or memory.known != names:  # those it knew booting, and those new since
                fresh = set(memory.booting).union(set(names).difference(memory.known) if memory.known != names else ())
                booted = [vm for vm in self.index.usable(region) if vm.name in fresh]
            errors = new_errors.get(region, [])
            memory = _with(memory, seen_errors_until=max(e.at for e in errors)) if errors else memory
            if booted:  # the cluster's VMs boot (probes.silent_cleared)
                self.plan.decisions += probes.silent_cleared(self.memory, region, self.now, self.timing)
                if memory.strikes or memory.blocked_until:
                    self._decide(Action.UNBLOCK, region, f"{booted[0].name} booted: the region delivers again")
                    recovered[region] = memory
                boot_s = learned_boot(memory, booted, self.s.heard_since, self.timing.spill_after_s)  # (flex: unread)
                memory = _with(memory, strikes=0, silent=0, blocked_until=None, last_boot_at=self.now, boot_s=boot_s)
            self.memory[region] = memory = preemptions.learn(memory, self.index.region(region), self.now, self.timing,
                                                             self.index.busy(region))
            if booted or self._blocked(region):
                continue  # it delivers; or it is blocked, struck once per episode (see _strike)
            capacity_errors, stuck = [e for e in errors if probes.strikes(e)], self.stuck[region]
            if capacity_errors:  # with a detail: the tick's quota read (ClusterManager.quota_short); read: its alone
                self._strike(region, capacity_errors[-1].detail or f"{sum(e.count for e in capacity_errors)} "
                             f"{capacity_errors[-1].kind.value.lower()} error(s)", **probes.cause(capacity_errors))
            elif silent := [vm for vm in stuck if vm.started]:  # it got capacity: its guest or agent never came up
                self.plan.decisions += probes.silent_boot(self.memory, region, silent[0], self._got_s(silent[0]),
                                                          self.now, self.timing)
            elif stuck:
                self._strike(region, f"{stuck[0].name} has not booted after {self._age(stuck[0]):.0f}s")
        for pool, dearer in probes.recovered_with(self.memory, recovered, self.ranking, self.s.unread, new_errors,
                                                  self.now, self.s.vms).items():
            self.memory[pool] = _with(self.memory[pool], blocked_until=None, last_boot_at=self.now)  # strikes kept
            self._decide(Action.UNBLOCK, pool, f"{dearer} delivers again: its region's cheaper pool is asked again")

    def match(self) -> list[tuple[DemandGroup, int]]:
        """Cover demand with idle, then healthy booting VMs; return (group, jobs left uncovered)."""
        idle = {r: len(self.idle[r]) for r in self.regions}
        # Booting VMs listed RUNNING cover demand first (usable first; the others are what a race lost:
        # cancel_losers).
        healthy = {r: h if (h := self.healthy[r]) and not self._blocked(r) else [] for r in self.regions}
        running = {r: sum(vm.running for vm in h) if h else 0 for r, h in healthy.items()}
        pending = {r: len(h) - running[r] if h else 0 for r, h in healthy.items()}
        self.queued = flexrun.Queued({r: self.healthy[r] for r in self.regions if self.ranking.flex(r)})
        uncovered = []
        for group in self.groups:
            with self._ending(idle, group):
                if left := self._cover(group, idle, running, pending):
                    uncovered.append((group, left))
        self.booting_left = flexrun.unneeded(running, pending, self.healthy, self._blocked, self.ranking.flex,
                                             uncovered)
        self.spare = (idle, running, pending)  # what no job took: a gang's ask may start from some (gangs.ask)
        return uncovered

    def _cover(self, group: DemandGroup, idle: dict[str, int], running: dict[str, int], pending: dict[str, int]) -> int:
        """Take ``group``'s VMs from the idle, running, then pending ones left (``late``: no queued request); its
        rest."""
        late = not self.patient(group) and not all(map(self.ranking.flex, group.regions))  # past its bound
        if group.gang > 1:  # each gang from one region's VMs, or none (of queued requests, one)
            return gangs.match(group, self.ranking.for_group(group), (idle, running, pending), self.idle_needed,
                               self.spares, self.queued, late)
        left, regions = group.count, self.ranking.for_group(group) + [r for r in group.regions if self._blocked(r)]
        for pool, needed in ((idle, self.idle_needed), (running, None), (pending, None)):
            for region in regions:
                queued = self.queued.get(region, 0) if late and pool is pending else 0  # queued requests cover it not
                if left and (take := min(left, pool.get(region, 0) - queued)) > 0:
                    pool[region], left = pool[region] - take, left - take
                    if needed is not None:
                        needed[region] += take
        return left

    def ask(self, uncovered: list[tuple[DemandGroup, int]]) -> None:
        # Instances count against limits until they are gone, whatever their phase.
        counts = {r: max(len(self.by_region.get(r, ())), self.s.target_sizes.get(r, 0)) for r in self.regions}
        total, limits, add = sum(counts.values()), self.s.cluster, self.plan.add
        hedge: defaultdict[str, int] = defaultdict(int)  # (plain calls: a generic alias's costs a microsecond)
        held: defaultdict[str, int] = defaultdict(int)
        hedgeable: list[tuple[list[str], int]] = []

        def room(region: str, capped: bool = True) -> int:  # under the limits (max_vms if capped), the last quota read
            free = min(limits.max_vms_per_region - counts[region] - add.get(region, 0),
                       limits.max_vms - total - sum(add.values()) if capped else quotas.UNLIMITED)
            return min(free, quotas.UNLIMITED if self.memory[region].quota_room is None else  # (quotas.left's answer)
                       quotas.left(self.memory, region, lambda pool: counts[pool] + add.get(pool, 0)))

        for region in self.regions:  # before this pass's asks: what the rest of a gang assembling there may get
            on_the_way = counts[region] - len(self.by_region.get(region, ()))  # asked for, not listed yet
            room_left = len(self.idle[region]) + len(self.healthy[region]) + on_the_way + max(0, room(region))
            self.memory[region] = _with(self.memory[region], gang_room=room_left, gang_room_at=self.now)
        compared: dict[str, tuple[list[str], DemandGroup]] = {}  # a pool asked for -> the ranking it was chosen from
        for group, left in uncovered:
            ranked = self.ranking.for_group(group)
            if group.gang > 1 and not ranked:  # every pool blocked: why, as for any job (it said "no room")
                held[self._hold_reason(group, counts, total)] += len(group.chunks())
                continue
            if group.gang > 1:  # a gang's VMs all from one pool; its hedge a whole gang too
                with self._ending(self.spare[0], group):  # nor as a spare
                    limited = list[int]()
                    asked = gangs.ask(group, left, ranked, room, add, held, self.spare, self.idle_needed,
                                      self.booting_left, self.plan.together, self.spares, self.queued, limited)
                self.at_limit += sum(limited)  # gangs max_vms alone holds: probes give way (yield_probes)
                for region, need in asked:
                    compared.setdefault(region, (ranked, group))
                    if self.uncertain(region):
                        if others := [r for r in ranked if r != region and self.hedge_priced(r, region)]:
                            hedgeable.append((others, -need))  # negative: a whole gang, in one pool
                continue
            for region in ranked:
                left -= flexrun.claim_queued(self.ranking.flex(region), region, left, self.spare[2], self.booting_left)
                take = min(left, room(region))
                if take <= 0:
                    continue
                compared.setdefault(region, (ranked, group))
                add[region], left = add.get(region, 0) + take, left - take
                if self.ranking.races_spare(group.regions, region):
                    self.spares.want.extend([region] * take)
                if self.uncertain(region):  # in no flex-start pool: cancel_losers ends a request no job needs
                    others = [r for r in ranked if r != region and self.hedge_priced(r, region)
                              and not self.ranking.flex(r)]
                    if others:
                        hedgeable.append((others, take))
                if left == 0:
                    break
            if left:
                held[self._hold_reason(group, counts, total)] += left
                if total + sum(add.values()) >= limits.max_vms and any(  # max_vms alone keeps a pool of theirs
                        limits.max_vms_per_region - counts[r] - add.get(r, 0) > 0 for r in ranked):
                    self.at_limit += left
        firsts = {region: list(units) for region, units in self.plan.together.items()}  # gangs' first asks
        for others, count in hedgeable:  # after every job's first ask: hedges never take a job's slot
            if count < 0:  # a gang's hedge: whole, in the first pool with room for it
                gangs.hedge(others, -count, room, add, hedge, self.plan.together, self.spares)
                continue
            for region in others:
                take = min(count, room(region))
                if take > 0:
                    add[region], hedge[region], count = add.get(region, 0) + take, hedge[region] + take, count - take
                if count == 0:
                    break
        self.spares.grant(room, add)  # after every first ask and hedge: they never take a job's place
        if not held:  # spares and hedge copies race on only while no demand waits for a place (zen.scaling.gangs)
            self.spares.kept(self.booting_left)
        for region, count in add.items():
            hedged, spared = hedge.get(region, 0), self.spares.asked.get(region, 0)
            if first := count - hedged - spared:
                wanted = gangs.wanted(first, firsts.get(region, ()), self.s.cluster.shared)
                prices = self.ranking.prices_compared(region, *compared.get(region, ((), None)))
                self._decide(Action.ADD, region, wanted + prices, first)
            # Its own price; a hedge's at most hedge_price_ratio x its first's.
            price = self.ranking.prices_compared(region, ())
            ratio = self.timing.hedge_price_ratio
            at_most = f", at most {ratio:g}x the first choice's (hedge_price_ratio)" if price else ""
            for n, why in ((hedged, f"hedge(s): the first choice's delivery is uncertain{price}{at_most}"),
                           (spared, f"spare boot(s){price}: a job starts at the first of its two boots, a gang at its "
                                    f"N-th of N+1")):
                if n:
                    self._decide(Action.ADD, region, f"{n} {why}", n)
        for why, count in held.items():
            self._decide(Action.HOLD, None, f"{gangs.waiting(count, self.s.cluster.shared)}: {why}", count)
        self._keep_min(counts, total)

    def yield_probes(self) -> None:
        """Jobs only ``max_vms`` holds: as many probes, less the places already being freed (VMs going away,
        those this pass deletes), give theirs (``zen.scaling.probes``); the next pass asks in them."""
        deleted = {name for _, name in self.plan.delete}  # the places freed: not a request's VMs it keeps whole
        wanted = self.at_limit - len(flexrun.kept_whole(self.plan, self.index)) - sum(
            len(vms) for (_, phase), vms in self.index.phases.items() if phase is VmPhase.DELETING)
        self.places_wanted = max(0, wanted)  # what probes do not give, unneeded boots do (cancel_losers)
        if wanted <= 0:
            return
        left = [vm for r in self.regions if self._blocked(r) for vm in probes.waiting(self.stuck[r])
                if vm.name not in deleted]
        until = {region: memory.blocked_until for region, memory in self.memory.items()}
        for vm in probes.giving_way(left, wanted, lambda vm: until[vm.region]):
            self.places_wanted -= 1
            self.plan.delete.append((vm.region, vm.name))
            self._decide(Action.DELETE, vm.region, f"a probe waiting for capacity gives its place to a pool not "
                         f"stocked out (cluster limit of {self.s.cluster.max_vms} VMs)", vm=vm.name)

    def _hold_reason(self, group: DemandGroup, counts: dict[str, int], total: int) -> str:
        if not (known := [r for r in group.regions if r in counts]):  # its configuration dropped them since
            pools = ", ".join(group.regions)
            return f"none of its pools ({pools}) is the cluster's any more (the configuration changed)"
        blocked = [r for r in known if self._blocked(r)]
        if len(blocked) < len(known) and total + sum(self.plan.add.values()) >= self.s.cluster.max_vms:
            return f"cluster limit of {self.s.cluster.max_vms} VMs reached"
        short = quotas.no_room(self.memory, known, lambda r: counts[r] + self.plan.add.get(r, 0))
        return probes.held_reason(self.memory, known, blocked, self.now, self.timing,  # a failed request is no queue
                                  lambda p: self.ranking.flex(p) and bool(probes.waiting(self.stuck[p])), short)

    def _keep_min(self, counts: dict[str, int], total: int) -> None:
        going = len(self.s.vms) - self.alive + len(self.plan.delete)  # drained, retired; silent (prune_silent)
        missing = probes.min_missing(self.s.cluster, total + sum(self.plan.add.values()), self.stuck, going)
        def held(pool: str) -> int:  # listed or asked
            return counts[pool] + self.plan.add.get(pool, 0)

        for region in self.rank(self.regions) if missing > 0 else ():  # nothing to keep: no ranking needed
            per_region = self.s.cluster.max_vms_per_region - held(region)
            take = min(per_region, missing, quotas.left(self.memory, region, held))
            if take > 0:
                self.plan.add[region] = self.plan.add.get(region, 0) + take
                missing -= take
                self._decide(Action.ADD, region, f"keep min_vms={self.s.cluster.min_vms}", take)

    def prune_silent(self) -> None:
        """VMs whose agent went silent (``releasing.silent``): no supply, deleted (drained first)."""
        for (region, phase), dead in releasing.silent(self.index.phases, self.now, self.timing).items():
            if phase is VmPhase.IDLE:
                self.idle[region] = tuple(vm for vm in self.index.phases[region, phase] if vm not in dead)
            self._release([(region, vm, releasing.unheard(vm, self.now)) for vm in dead])

    def prune_stuck(self) -> None:  # one probe per blocked pool wanted (zen.scaling.probes)
        wanted = {r for group in self.groups for r in group.regions}
        later = self.now + timedelta(seconds=self.timing.block_s)
        for region in self.regions:
            if not self.stuck[region]:
                continue
            kept, deleted = probes.pruned(self.stuck[region], region in wanted, self._got_s, self.timing)
            for vm in deleted:
                self.plan.delete.append((region, vm.name))
                self._decide(Action.DELETE, region, probes.why_pruned(vm, self._age(vm), self._got_s, self.timing),
                             vm=vm.name)
            if kept and self._blocked(region):
                until = max(self.memory[region].blocked_until or self.now, later)
                self.memory[region] = _with(self.memory[region], blocked_until=until)

    def cancel_losers(self) -> None:
        """Booting VMs whose race is over, or whose place a job ``max_vms`` holds wants (``releasing.losers``)."""
        above_min = self.alive - len(self.plan.delete) - self.s.cluster.min_vms
        losers, self.places_wanted = releasing.losers(self.groups, self.regions, self.ranking, self.index,
                                                      self.healthy, self.booting_left, self.got, self.asked,
                                                      self.places_wanted, above_min)
        self._release(losers)

    def shrink_idle(self) -> None:
        """Idle VMs kept longer than they are worth (``releasing.unneeded_idle``)."""
        if not any(self.idle.values()):
            return  # no idle VM: nothing to consider
        alive = probes.with_capacity(self.index.phases, {name for _, name in self.plan.delete})  # no probe counts
        self._release(releasing.unneeded_idle(self.idle, self.regions, self.rank(self.regions), self.idle_needed,
                                              self.took, self.s.cluster, self.ranking, self.timing, self.now,
                                              self.s.arrivals_last_hour, alive))

    def _release(self, released: list[releasing.Release]) -> None:
        for region, vm, why in released:
            self.plan.delete.append((region, vm.name))
            self._decide(Action.DELETE, region, why, vm=vm.name)

    def run(self) -> Plan:
        self.learn()
        self._blocked_after_learn = {r for r in self.regions if self._blocked(r)}
        self.prune_silent()
        uncovered = self.match()
        self.ask(uncovered)
        self.prune_stuck()
        self.yield_probes()
        self.cancel_losers()
        flexrun.keep_requests_whole(self.plan, self.index)
        self.shrink_idle()
        for region, m in self.memory.items():
            booting = sorted(self.stuck[region] + self.healthy[region], key=lambda vm: vm.name)
            names = tuple(vm.name for vm in booting)
            got = tuple(vm.name for vm in booting if vm.started)
            if (known := self.index.names(region)) != m.known or names != m.booting or got != m.started:
                since = tuple(self.asked.get(vm.name, vm.since.timestamp()) for vm in booting)
                m = _with(m, booting=names, booting_since=since, known=known, started=got,
                          started_since=tuple(self.got[name] for name in got))
            self.plan.memory[region] = m
        return self.plan

