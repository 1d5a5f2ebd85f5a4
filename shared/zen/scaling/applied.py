"""The decisions as applied: what ``ClusterManager.apply`` did, not only what the plan asked.

A plan's ADD may be capped (the per-MIG or cluster limit, read again at apply time) or fail (a
resize error, a MIG not read this pass); a DELETE may be refused (the VM took a job before it was
drained) or fail (the VM stays drained and a later pass deletes it again). ``zen explain`` and the
``scaling_decisions`` table get what happened: a capped ADD counts the VMs added and says why the
rest were not; an ADD of which nothing was added, and a DELETE that did not happen, become a HOLD
that says so, the plan's reason kept after it. ``ClusterReport``: what a pass did, as ``ClusterManager.run``
returns it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime

from zen import telemetry
from zen.scaling.coverage import Coverage
from zen.scaling.model import Action, Decision, Plan, Timing
from zen.scaling.port import FleetPort, MigApiError, MigBusy, MigRateLimited, MigUnconfirmed
from zen.scaling.probes import clipped, strike

log = logging.getLogger("zen.scaling")


def as_applied(decisions: list[Decision], added: dict[str, int], short: dict[str, str],
               undeleted: dict[str, str]) -> list[Decision]:
    """``added``: region -> VMs added; ``short``: region -> why fewer than asked were; ``undeleted``: VM ->
    why a planned deletion did not happen."""
    if not short and not undeleted:
        return decisions
    left = dict(added)  # handed to the region's ADD decisions in plan order (jobs before hedges)
    out = []
    for d in decisions:
        if d.action is Action.ADD and d.region in short:
            done = min(d.count, left.get(d.region, 0))
            left[d.region] = left.get(d.region, 0) - done
            why = short[d.region]
            if done == 0:
                d = Decision(Action.HOLD, d.region, f"{d.count} VM(s) not added: {why} (planned: {d.reason})", d.count)
            elif done < d.count:
                d = replace(d, count=done, reason=f"{d.reason} ({done} of {d.count} added: {why})")
        elif d.action is Action.DELETE and d.vm in undeleted:
            d = Decision(Action.HOLD, d.region, f"not deleted: {undeleted[d.vm]} (planned: {d.reason})", vm=d.vm)
        out.append(d)
    return out


@dataclass
class ClusterReport:
    cluster: str
    skipped: bool = False
    added: dict[str, int] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    kept_busy: list[str] = field(default_factory=list)  # planned deletions refused: the VM took a job
    errors: list[str] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    coverage: Coverage | None = None  # what the pass says about one more job (see Coverage)
    short: dict[str, str] = field(default_factory=dict)  # region -> why fewer VMs than planned were added
    undeleted: dict[str, str] = field(default_factory=dict)  # VM -> why its planned deletion did not happen
    refused: dict[str, str] = field(default_factory=dict)  # pool -> why its resize failed (``struck``)
    planned_failures: list[int] = field(default_factory=list)  # kept failures it plans with (``zen.scaling.reported``)

    def merge(self, later: ClusterReport) -> ClusterReport:
        """This report and a later pass's (a rerun), as one."""
        self.added = {r: self.added.get(r, 0) + later.added.get(r, 0) for r in {**self.added, **later.added}}
        for name in ("deleted", "kept_busy", "errors", "decisions"):
            getattr(self, name).extend(getattr(later, name))
        self.short, self.undeleted = {**self.short, **later.short}, {**self.undeleted, **later.undeleted}
        self.coverage = later.coverage  # the latest pass's view (one that did not read everything spares nothing)
        return self


def as_done(plan: Plan, sizes: dict[str, int], report: ClusterReport, now: datetime, timing: Timing) -> Plan:
    """``plan`` as ``ClusterManager.apply`` left things: its decisions as applied, each pool's memory with its MIG's
    size as last read (what an unread MIG is taken to hold), the pools whose resize failed ``struck``. A copy where
    anything differs: the policy's own plan is left as it returned it."""
    sized = {r: m.replaced(sized=n) for r, m in plan.memory.items() if (n := sizes.get(r, m.sized)) != m.sized}
    decisions = as_applied(plan.decisions, report.added, report.short, report.undeleted)
    if sized or decisions is not plan.decisions or report.refused:
        plan = replace(plan, memory={**plan.memory, **sized}, decisions=decisions)
    return struck(plan, report.refused, now, timing)


def struck(plan: Plan, refused: dict[str, str], now: datetime, timing: Timing) -> Plan:
    """``plan`` with each pool whose resize failed (``refused``) struck as a stockout strikes it, unless blocked
    already: its jobs go to the next pool meanwhile, and the pool is asked again when its block ends. Its memory
    keeps why (``RegionMemory.resize_failed``): a job held there was told "every allowed region is stocked out ...;
    probes are waiting for capacity", of a region with no stockout and no probe (a 403 for a missing permission)."""
    for pool, why in refused.items():
        memory = plan.memory.get(pool)
        if memory is not None and not (memory.blocked_until and memory.blocked_until > now):
            plan.memory[pool], blocked = strike(memory, pool, f"its resize failed: {why}", now, timing,
                                                resize=clipped(why))
            plan = replace(plan, decisions=plan.decisions + [blocked])
    return plan


def resize_failed(report: ClusterReport, region: str, exc: MigApiError, sizes: tuple[int, int] | None) -> int:
    """A pool's resize that raised (``sizes``: its target before and the one sent; None: its MIG was not read this
    pass, nothing was sent): the VMs it counts toward the cluster's limits (those it may yet add), with what the pass
    says of it and whether its pool is struck (``report.refused``, ``struck``): a resize refused, or sent and never
    answered. One Compute accepted whose operation could not be read is added, as the next read of its target shows;
    a rate limit (the project's write quota for a moment) strikes nothing: either blocked its pool as a stockout, and
    the queue went to other pools (a third VM for one job), the cluster logged as stocked out; what one carried out in
    part added (``MigRateLimited.added``: a flex-start resize's requests made before) is counted and said added (the
    manager takes its MIG to hold them while it cannot be read: ``RegionMemory.sized``). Nor
    does a resize not sent while an earlier write to its MIG was in flight (``MigBusy``)."""
    report.errors.append(f"resize {region}: {exc}")
    if isinstance(exc, MigRateLimited):  # (of a flex-start resize, its requests made before: ``added``)
        report.short[region] = f"rate limited by Compute, asked again next pass: {exc}"
        if exc.added:
            report.added[region] = exc.added
        return exc.added
    if isinstance(exc, MigBusy):  # nothing sent: resized from a stale target, the MIG would have been set wrong
        report.short[region] = f"an earlier change to its MIG is still being carried out, asked again next pass: {exc}"
        return 0
    if sizes is None:  # not read: nothing was sent
        report.short[region] = f"resize failed: {exc}"
        return 0
    asked = sizes[1] - sizes[0]
    if isinstance(exc, MigUnconfirmed) and exc.accepted:
        report.added[region] = asked
        return asked
    unconfirmed = isinstance(exc, MigUnconfirmed)
    report.short[region] = (f"the resize to {sizes[1]} was not confirmed, counted toward the limits: {exc}"
                            if unconfirmed else f"resize failed: {exc}")
    report.refused[region] = f"not confirmed ({exc})" if unconfirmed else str(exc)
    return asked if unconfirmed else 0


def record(fleet: FleetPort, cluster: str, plan: Plan, report: ClusterReport, now: datetime) -> None:
    """A pass's last step (``ClusterManager``): its memory and decisions as applied, stored and logged."""
    report.decisions = plan.decisions
    fleet.record(cluster, plan.memory, plan.decisions, now, report.planned_failures)
    for decision in plan.decisions if log.isEnabledFor(logging.INFO) else ():  # formatted only if logged
        telemetry.emit(log, telemetry.SCALING_DECISION, f"scaling {decision.action.value.lower()}",
                       cluster=cluster, region=decision.region, action=decision.action.value,
                       vm=decision.vm, count=decision.count, reason=decision.reason)
    for vm in report.kept_busy:
        log.info("scale-down skipped: the VM took a job", extra={"cluster": cluster, "vm": vm})
    for error in report.errors:
        log.warning("scaling call failed", extra={"cluster": cluster, "error": error})


def hold_lost(report: ClusterReport) -> ClusterReport:
    """A pass whose cluster lock went before it applied its plan (``Hold.lost``): its request was cut at its
    function's timeout and stood still, throttled, until its instance got the CPU again, while Postgres ended the
    lock's connection and another pass took the cluster, read it anew and asked for the same VMs (a resize computed
    from the MIG's target read again now passed every check and asked for them twice) or deleted the same ones.
    Nothing applied nor recorded: the next pass plans from what is there then."""
    report.skipped = True
    report.errors.append("the cluster's lock went while this pass stood still (past its function's timeout): "
                         "its plan, made before, was not applied; the next pass plans again")
    log.warning("scaling pass dropped: its cluster lock went before it applied", extra={"cluster": report.cluster})
    return report
