"""ClusterManager (one per cluster) and ClusterOrchestrator (all clusters): load, plan, apply, record.

The manager reaches Compute only through ``MigPort`` and the database only through ``FleetPort``
(``zen.scaling.port``): production wires the google-cloud-compute adapter and ``FleetDb``, the
simulator its simulated MIGs and fleet (so it runs this very class), unit tests recording fakes.
A pass for one cluster, under the cluster's lock: snapshot, plan (``ZenPlanner``), retire, apply
(adds first, then drained deletions), record. Step by step: docs/explanations/scaling.md ("In the code")."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable

from zen import telemetry
from zen.telemetry import Quiet
from zen.core.clock import Clock
from zen.core.config import ClusterConfig, ZenConfig
from zen.core.quotas import Shortfall
from zen.scaling.applied import ClusterReport, as_done, hold_lost, record, resize_failed
from zen.scaling.asks import PassAsksDb
from zen.scaling.compute_pool import compute_pool
from zen.scaling.coverage import Coverage, Taken, racing
from zen.scaling.flexrun import ending
from zen.scaling.fleetdb import FleetDb
from zen.scaling.port import FleetPort, MigApiError, MigInstance, MigNotFound, MigPort, MigState, MigSummary, MigUnconfirmed
from zen.scaling.port import PassAsks, QuotaPort, whole_units
from zen.scaling.model import (Action, ClusterLimits, ClusterSnapshot, Decision, ErrorKind, MigError, Plan, Policy,
                               Pool, RegionMemory, Timing)
from zen.scaling.planner import ZenPlanner
from zen.scaling.pricing import PoolPrices, cluster_pools
from zen.scaling.listing import region_summaries
from zen.scaling.quotas import Planned, TickQuotas, planning_order
from zen.scaling.reported import Unreported
from zen.scaling.sharing import absorb
from zen.scaling.timing import timing_from_config
from zen.scaling.unread import last_known_size, planner_view, target_or_error
from zen.scaling.vms import VmViews, leftover_reasons, leftovers

if TYPE_CHECKING:  # the service needs only the interface; the driver loads in the adapter
    from zen.core.prices import PriceTable
    from zen.store.db import Database


log = logging.getLogger("zen.scaling")

MAX_RERUNS = 2  # passes run again for asks made during a pass; more wait for the tick (a minute)
RERUN_WITHIN_S = 10.0  # nor once passes took this long: a submission's function has 60 s in all


class ClusterManager:
    def __init__(self, cluster: ClusterConfig, fleet: FleetPort, migs: dict[str, MigPort], clock: Clock,
                 timing: Timing, policy: Policy | None = None, telemetry: bool = True, concurrent: bool = True,
                 asks: PassAsks | None = None, pools: dict[str, Pool] | None = None):
        """``migs``: one port per pool of the cluster (``ClusterConfig.pools``; with one model, per region);
        ``pools``: what each pool is, priced (None: the cluster's pools, unpriced)."""
        self.cluster = cluster
        self.pools = pools if pools is not None else cluster_pools(cluster)
        self._asks = asks  # passes asked for while this one held the cluster (None: never rerun)
        self._telemetry = Quiet() if telemetry else None  # the per-pass operator log lines; the simulator skips them
        # Several MIGs are read at once on the Compute pool; the simulator's MIGs are in memory, where
        # handing each read to a thread only costs (a third of a 30-day replay's time).
        self._map = (lambda read, items: compute_pool().map(read, items)) if concurrent else map
        self._fleet, self._migs = fleet, migs
        self._clock, self._timing = clock, timing
        self.policy = policy or ZenPlanner()
        self._views = VmViews()  # the VMs as the last pass saw them (rebuilt only where their inputs changed)
        self._sizes: dict[str, int] = {}  # region -> its MIG's target size as last read
        self.quota_short: dict[str, Shortfall] = {}  # as the tick read GPU quotas: pool -> the quota no VM fits in
        self.quota_room: dict[str, int] | None = None  # pools short of a region's worth of VMs: their room; to one pass
        self._limits: tuple[dict[str, Pool], ClusterLimits] | None = None  # the pools, and the limits made with them
        self._unreported = Unreported(fleet, cluster.name)  # failures reported once whose states a pass dropped

    def run(self, states: dict[str, MigState | MigApiError] | None = None,
            read_at: datetime | None = None) -> ClusterReport:
        """One pass; ``states`` are the MIGs' states if already read (the tick reads all at once, from
        ``read_at`` on, before it takes this cluster's lock: see ``snapshot``). Finding the lock held,
        it asks the holder for one more pass and tries once again; holding it, it runs again (at most
        ``MAX_RERUNS`` times) while passes were asked since it began (``zen.scaling.asks``)."""
        name, asks = self.cluster.name, self._asks
        report, passes, asked, began = ClusterReport(name), 0, False, time.monotonic()
        seen = asks.asked(name) if asks is not None else 0  # read before the snapshot
        while True:
            with self._fleet.cluster_lock(name) as locked:
                if locked:
                    one = self._pass(states, read_at, locked.lost)
                    report = one if not passes else report.merge(one)
                    passes += 1
            if not locked:
                if asks is None or asked or passes:
                    report.skipped = not passes
                    self._unreported.keep(states, self._clock())  # unplanned: its request failures go to the next pass
                    return report
                seen, asked = asks.ask(name), True  # the holder runs again, or it has let go by now
                continue
            done = asks is None or passes > MAX_RERUNS or time.monotonic() - began > RERUN_WITHIN_S
            now_asked = None if done or asks is None else asks.asked(name)  # read after letting go
            if now_asked is None or now_asked == seen:
                return report
            seen, states, read_at = now_asked, None, None

    def _pass(self, states: dict[str, MigState | MigApiError] | None, read_at: datetime | None,
              lost: Callable[[], bool]) -> ClusterReport:
        report = ClusterReport(self.cluster.name)
        snapshot, zones = self.snapshot(report, states, read_at)
        view, waiting = planner_view(snapshot)  # an unread MIG's region: no adds, its last known size
        plan = self._retire(self.policy.plan(view), snapshot)
        if snapshot.unread:  # no memory of an unread region is kept: the plan saw no VMs there, and the
            # next pass would take its usable VMs for fresh boots (a stockout block lifted, strikes reset)
            plan = replace(plan, memory={r: m for r, m in plan.memory.items() if r not in snapshot.unread},
                           decisions=plan.decisions + waiting)
        if lost():  # it stood still past its function's timeout, and its lock went: another pass may have done this
            return hold_lost(report)
        self.apply(plan, snapshot, zones, report)
        plan = as_done(plan, self._sizes, report, snapshot.now, self._timing)
        record(self._fleet, self.cluster.name, plan, report, self._clock())  # 4. record
        if self._telemetry is not None:
            telemetry.log_pass(log, snapshot, plan, self._telemetry)
        report.coverage = Coverage.after(snapshot, sum(report.added.values()), report.deleted, whole=not report.errors)
        return report

    @property
    def regions(self) -> list[str]:
        return list(self._migs)

    def memory(self) -> dict[str, RegionMemory]:
        return self._fleet.memory(self.cluster.name)

    def mig(self, region: str) -> MigPort:
        return self._migs[region]

    def read_mig(self, region: str, memory: dict[str, RegionMemory],
                 summaries: dict[str, MigSummary] | None = None) -> MigState | MigApiError:
        mig = self._migs[region]
        remembered = memory.get(region)  # no memory yet: every error is new
        try:
            return mig.read(since=None if remembered is None else remembered.seen_errors_until,
                            summary=(summaries or {}).get(mig.name))
        except MigApiError as exc:
            return exc
        except Exception as exc:  # noqa: BLE001 - an adapter that let one through: this MIG is left alone
            return MigApiError(f"reading {mig.name} failed: {type(exc).__name__}: {exc}")

    # -- 1. snapshot ---------------------------------------------------------------------------
    def snapshot(self, report: ClusterReport, states: dict[str, MigState | MigApiError] | None = None,
                 read_at: datetime | None = None) -> tuple[ClusterSnapshot, dict[str, str | None]]:
        now = self._clock()
        name = self.cluster.name
        facts = self._fleet.facts(name, now)
        if states is not None and read_at is not None and facts.last_pass_at is not None \
                and facts.last_pass_at >= read_at:  # another pass planned the cluster since: its adds are not in them
            if self._unreported.keep(states, now):  # read again: their request failures, reported once, are kept
                facts = self._fleet.facts(name, now)  # and planned with now (zen.scaling.reported)
            states = None
        if states is None:  # the regions' Compute calls at once
            states = dict(zip(self._migs, self._map(lambda r: self.read_mig(r, facts.memory), self._migs)))
        targets: dict[str, int] = {}
        errors = []
        seen: dict[str, list[str]] = {}  # the regions read: their instances' names; and ``billed``, those GCE bills
        billed: dict[str, list[str]] = {}  # (annotated, not ``dict[...]()``: a type made and called every pass)
        listings: dict[str, list[MigInstance]] = {}
        kept, report.planned_failures = self._unreported.take(facts, [r for r, s in states.items() if isinstance(
            s, MigState)], self._migs)  # failures reported once that a pass dropped (zen.scaling.reported)
        for region in self._migs:
            state = states[region]
            if isinstance(state, MigApiError):
                # Unknown state: nothing is added there, and it counts as its last known size (zen.scaling.unread);
                # a MIG that does not exist (deleted by hand: terraform apply recreates it) holds none.
                report.errors.append(f"{region}: {state}")
                targets[region] = 0 if isinstance(state, MigNotFound) else last_known_size(region, facts.memory, self._sizes)
                continue
            targets[region] = self._sizes[region] = state.target_size
            # A secondary pool's MIG reports its errors by region: the planner keeps them by pool.
            found = state.errors + kept.get(region, [])
            errors += found if region in self.cluster.regions else [replace(e, region=region) for e in found]
            seen[region], billed[region] = self._views.names_of(region, state.instances)
            listings[region] = state.instances
        first_seen = self._fleet.see_instances(name, seen, now, billed)
        vms, zones = self._views.build(listings, first_seen, facts)
        if self._limits is None or self._limits[0] is not self.pools:  # made again only when a tick priced pools anew
            self._limits = (self.pools, ClusterLimits(name, tuple(self.pools), (c := self.cluster).max_vms_per_region,
                            c.max_vms, c.min_vms, pools=self.pools, flex_run_s=c.flex_start_run_s, shared=c.max_jobs_per_vm > 1))
        limits = self._limits[1]
        demand = facts.demand
        if demand and self.quota_short:  # a pool no VM fits in is struck as after a QUOTA_EXCEEDED, without asking
            errors += [MigError(pool, ErrorKind.QUOTA, now, detail=short.text())
                       for pool, short in self.quota_short.items() if pool in seen]
        if self.cluster.max_jobs_per_vm > 1:  # busy VMs with room take queued jobs too (zen.scaling.sharing)
            demand = absorb(*self._fleet.shared_load(name, now), vms, self.cluster.gpu_count, self.cluster.max_jobs_per_vm,
                            ending(limits, self._timing, now), facts.agents)  # no room on a flex VM ending first
        snapshot = ClusterSnapshot(now=now, cluster=limits, queued=(), demand=demand, vms=vms,
                                   target_sizes=targets, errors=tuple(errors), memory=facts.memory,
                                   timing=self._timing, arrivals_last_hour=facts.arrivals, heard_since=facts.heard_since,
                                   unread=frozenset(self._migs.keys() - seen.keys()), quota_room=self.quota_room,
                                   oldest_queued=facts.oldest_queued)
        self.quota_room = None  # that pass remembers it, with the VMs listed then (zen.scaling.quotas.left)
        return snapshot, zones

    def _retire(self, plan: Plan, snapshot: ClusterSnapshot) -> Plan:
        """The plan, plus deleting the VMs on their way out that nobody deletes (``leftovers``)."""
        silence = self._timing.agent_silence_s  # (infinite in the simulator, whose agents only report changes)
        found = leftovers(self._views.leaving(snapshot.vms), self._views.view, {name for _, name in plan.delete},
                          None if silence == float("inf") else snapshot.now - timedelta(seconds=silence),
                          lambda vm: (vm.model or getattr(self.pools.get(vm.region), "model", None)) == "standard")
        if not found:
            return plan
        why = leftover_reasons(self.cluster.pull_limits_text(), silence)
        return replace(plan, delete=plan.delete + [(vm.region, vm.name) for vm, _ in found], decisions=plan.decisions
                       + [Decision(Action.DELETE, vm.region, why.get(kind, kind), vm=vm.name) for vm, kind in found])

    # -- 3. apply ------------------------------------------------------------------------------
    def apply(self, plan: Plan, snapshot: ClusterSnapshot, zones: dict[str, str | None], report: ClusterReport) -> None:
        # Both limits hold whatever a policy asks: per MIG, and across the cluster (counted from every
        # MIG's target size read again now, not the snapshot's, deletions of this pass not yet
        # subtracted: never above the cap; a MIG that cannot be read counts as the snapshot says).
        read = [r for r in self._migs if r not in snapshot.unread] if plan.add else []  # an unread one: not again
        fresh = dict(zip(read, self._map(lambda r: target_or_error(self._migs[r]), read))) if read else {}
        total = sum(t if isinstance(t := fresh.get(r), int) else snapshot.target_sizes.get(r, 0)
                    for r in self._migs) if plan.add else 0  # (only adds count it)
        for region, count in plan.add.items():
            mig = self._migs[region]
            try:
                current = fresh.get(region, MigApiError("not read this pass"))
                if isinstance(current, MigApiError):  # never added blindly
                    raise current
                size = min(current + count, self.cluster.max_vms_per_region,
                           current + max(0, self.cluster.max_vms - total))
                if self.pools[region].model == "flex-start" and (gangs := plan.together.get(region, ())):
                    whole = sum(whole_units(gangs, size - current))  # all-or-nothing requests: a gang that no longer
                    size = current + whole + min(count - sum(gangs), size - current - whole)  # fits is asked none
                if size - current < count:  # (before the resize: one accepted but unconfirmed is capped too)
                    report.short[region] = ("the per-MIG limit (max_vms_per_region) reached"
                                            if self.cluster.max_vms_per_region <= current + max(0, self.cluster.max_vms - total)
                                            else f"the cluster limit of {self.cluster.max_vms} VMs reached")
                if size > current:
                    mig.resize(size, together=whole_units(plan.together.get(region, ()), size - current))
                    report.added[region] = size - current
                    total += size - current
                    self._sizes[region] = size
            except MigApiError as exc:  # what it counts toward the limits, says and strikes: ``applied.resize_failed``
                counted = resize_failed(report, region, exc, None if exc is current else (current, size))
                total += counted
                if isinstance(exc, MigUnconfirmed):  # it may yet be carried out
                    self._sizes[region] = max(self._sizes.get(region, 0), size)
                elif counted and isinstance(current, int):  # carried out in part (``MigRateLimited.added``): what it added
                    self._sizes[region] = max(self._sizes.get(region, 0), current + counted)
        by_region: dict[str, list[str]] = {}
        for region, vm in plan.delete:
            if self._drain(vm, region):
                by_region.setdefault(region, []).append(vm)
            else:
                report.kept_busy.append(vm)
                report.undeleted[vm] = "it took a job before it was drained"
        for region, names in by_region.items():
            try:
                kept = self._migs[region].delete_instances(names, zones) or {}  # rightly not deleted, and why
                report.deleted += [vm for vm in names if vm not in kept]
                report.undeleted.update(kept)
            except MigApiError as exc:  # of those it names (else all), the delete failed; the others went
                report.errors.append(f"delete in {region}: {exc}")
                report.deleted += [vm for vm in names if exc.undeleted is not None and vm not in exc.undeleted]
                report.undeleted.update({vm: f"drained, but the delete failed ({exc}); tried again next pass"
                                         for vm in names if exc.undeleted is None or vm in exc.undeleted})

    def _drain(self, vm: str, region: str) -> bool:
        """Mark ``vm`` as going away unless it holds a job; from then on its claims are refused."""
        return self._fleet.drain_unless_busy(vm, self.cluster.name, region, self._clock())

class ClusterOrchestrator:
    """Runs every cluster's manager; one cluster's failure never stops the others.

    Managers (and so the Compute clients) are built on first use, so a function that never scales
    (or cannot reach Compute) still starts and handles its messages."""

    def __init__(self, config: ZenConfig, db: Database, clock: Clock,
                 mig_factory: Callable[[str, str, str, str], MigPort], policy: Policy | None = None,
                 prices: Callable[[], PriceTable] | None = None, quotas: QuotaPort | None = None):
        """``prices``: reads the price table the planner ranks pools by (``zen.scaling.pricing``); ``quotas``:
        Compute's GPU quotas, read by the tick (``zen.scaling.quotas``; None: not read)."""
        self._config, self._quotas = config, quotas
        self._prices = PoolPrices(prices)
        self._fleet = FleetDb(db, {c.name: c for c in config.clusters}, config.pricing, config)
        self._asks, self._clock, self._mig_factory, self._policy = PassAsksDb(db), clock, mig_factory, policy
        self._timing = timing_from_config(config)
        self._managers: dict[str, ClusterManager] = {}
        self._building = threading.Lock()
        self._coverage: dict[str, Coverage] = {}  # cluster -> what this instance's last pass saw
        self._taken = Taken()  # the spares ``covered`` handed out since: a pass planning meanwhile does not know them
        self._coverage_lock = threading.Lock()

    def covered(self, cluster: str, regions: tuple[str, ...] | None = None) -> bool:
        """Is one more queued job of ``cluster`` allowing ``regions`` already provided for (``Coverage``)?"""
        with self._coverage_lock:
            coverage = self._coverage.get(cluster)
            return coverage is not None and self._taken.covers(cluster, coverage, self._clock(), regions)

    def racing(self, cluster: str) -> bool:
        """Does a VM of ``cluster`` that became usable call for a pass now (``zen.scaling.coverage.racing``)? This
        instance's last pass, else the memory every instance's passes store (one read): boots another function
        asked for (listed booting, or not yet), whose losers otherwise ran on, billed, until the next tick."""
        with self._coverage_lock:
            known = self._coverage.get(cluster)
        return racing(known) or any(m.booting or m.sized > len(m.known) for m in self._fleet.memory(cluster).values())

    def manager(self, cluster: str) -> ClusterManager:
        # One per cluster, even when an instance's first passes come at once; the MIG factory is called
        # only here, under this lock (Zen.from_env builds the Compute clients in it, once).
        with self._building:
            if cluster not in self._managers:
                config = self._config.cluster(cluster)
                assert config is not None, f"no cluster {cluster!r} in the configuration"
                migs = {key: self._mig_factory(self._config.project, pool.region,  # one MIG per pool
                                               config.mig_name(pool.region, pool.model), pool.model)
                        for key, pool in cluster_pools(config).items()}
                timing = replace(self._timing, max_start_wait_s=config.max_start_wait_s)  # its jobs' default bound
                self._managers[cluster] = ClusterManager(config, self._fleet, migs, self._clock, timing,
                                                         self._policy, asks=self._asks)
            manager = self._managers[cluster]
        manager.pools = self._prices.pools(manager.cluster)  # kept while the prices are (zen.scaling.pricing)
        return manager

    def tick(self) -> dict[str, ClusterReport]:
        """One pass over every cluster; it never waits (a Cloud Function must not sleep idle).

        Every MIG of every cluster is read first, ``COMPUTE_CONCURRENCY`` calls at a time, then each
        cluster is planned and applied: the tick's Compute time grows with MIGs / concurrency, its
        database work with MIGs and VMs, never with queued jobs (demand is aggregated in SQL).

        What a follow-up pass 15 s later used to catch (a stockout on the instances just asked for) is
        handled without waiting: the planner hedges an uncertain region with a second one at once, and
        errors the MIG reports late (``listErrors``) are read by the next submission's or tick's pass."""
        managers = {}
        for cluster in self._config.clusters:
            try:
                manager = self.manager(cluster.name)
                managers[cluster.name] = (manager, manager.memory())
            except Exception:  # noqa: BLE001 - logged; planned below without prefetched state
                log.exception("could not prepare a scaling pass", extra={"cluster": cluster.name})
        read_at = self._clock()  # a pass of a cluster planned from then on may have changed its MIGs
        # One list call per region gives every MIG's target size and stability ...
        listers: dict[str, MigPort] = {}
        for manager, _ in managers.values():
            for key in manager.regions:  # pool keys: one list call per real region
                listers.setdefault(manager.mig(key).region, manager.mig(key))

        summaries = region_summaries(listers.values(), compute_pool().map)
        quotas = None if self._quotas is None else TickQuotas(  # one fresh read per region a tick (zen.scaling.quotas)
            self._quotas, list(listers), compute_pool().map)
        # ... then each non-empty MIG's instances (and errors, while instances are being created).
        reads = [(name, region) for name, (manager, _) in managers.items() for region in manager.regions]
        states: dict[str, dict[str, MigState | MigApiError]] = {name: {} for name in managers}
        for (name, region), state in zip(reads, compute_pool().map(
                lambda read: managers[read[0]][0].read_mig(read[1], managers[read[0]][1], summaries), reads)):
            states[name][region] = state
        reports = {}  # in turn: the quota room one takes, the next is not given
        before: list[Planned] = []  # those planned, for the room those after them took (quotas.settle)
        for cluster in planning_order(self._config.clusters, self._fleet.queue_heads if quotas is not None else None):
            planned = managers[cluster.name][0] if cluster.name in managers and quotas is not None else None
            if planned is not None and quotas is not None:
                planned.quota_short, planned.quota_room = quotas.check(planned.cluster, planned.pools)
            reports[cluster.name] = self.scale(cluster.name, states.get(cluster.name), read_at)
            if planned is not None and quotas is not None:
                quotas.took(planned.cluster, planned.pools, reports[cluster.name].added)
                if not reports[cluster.name].skipped:
                    before.append((planned.cluster, planned.pools, reports[cluster.name].added))
        if quotas is not None:  # the room of those planned first, less what those after them took
            quotas.settle(self._fleet, before, self._clock())
        return {cluster.name: reports[cluster.name] for cluster in self._config.clusters}

    def scale(self, cluster: str, states: dict[str, MigState | MigApiError] | None = None,
              read_at: datetime | None = None) -> ClusterReport:
        """One pass over one cluster (right after a submission, and from ``tick``)."""
        try:
            report = self.manager(cluster).run(states, read_at)
            if report.coverage is not None:
                with self._coverage_lock:  # less the spares handed out since its snapshot (``Taken``)
                    self._coverage[cluster] = self._taken.since(cluster, report.coverage)
            return report
        except Exception as exc:  # noqa: BLE001 - logged; the next tick tries again
            log.exception("scaling pass failed", extra={"cluster": cluster})
            if self._fleet.record_failure(cluster, exc, self._clock()):  # ``zen explain CLUSTER``; the metric
                telemetry.emit(log, telemetry.SCALING_DECISION, "scaling error", cluster=cluster, region=None,
                               action="ERROR", count=0, vm=None, reason=f"{type(exc).__name__}: {str(exc)[:500]}")
            return ClusterReport(cluster, errors=[str(exc)])
