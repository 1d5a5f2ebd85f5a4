"""Whether a cluster's last pass already provides for one more queued job (``Coverage``, less the spares
``Taken`` handed out since), so a submission can skip a pass, and whether a VM that became usable calls
for one (``racing``). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from zen.scaling.flexrun import foreign
from zen.scaling.model import ClusterSnapshot, VmPhase, vm_index

COVERAGE_TRUST_S = 10.0  # how long a pass's view of a cluster may spare later submissions a pass


def racing(coverage: "Coverage | None") -> bool:
    """Whether a VM of the cluster becoming usable calls for a pass at once: the cluster's last pass
    left VMs booting (hedges this VM may have beaten), or no pass of it is known here. Otherwise the
    VM takes queued work itself and the tick sees to the rest (a pass per job end would read every
    MIG of the cluster each time: Compute calls, not outcomes)."""
    return coverage is None or coverage.booting > 0


@dataclass
class Coverage:
    """What a cluster's last pass says about one more queued job: covered when that pass left an
    idle VM beyond the queued jobs in one of the job's allowed regions (which the new job then
    takes) or found the cluster at its VM limit (a pass could add nothing). The cheap check that
    spares a submission a full pass; the periodic tick re-plans every cluster regardless. Only idle
    VMs count as spare: a booting one may be a hedge, or stuck in a stockout that the next pass
    would see."""

    at: datetime
    spares: dict[str, int]  # region -> idle VMs no queued job takes (the most constrained jobs served first)
    saturated: bool
    booting: int = 0  # VMs the pass left booting (asked for included): races a VM now usable may have won

    @property
    def spare(self) -> int:
        return sum(self.spares.values())

    @classmethod
    def after(cls, snapshot: ClusterSnapshot, added: int, deleted: Iterable[str] = (), whole: bool = True) -> "Coverage":
        """``added``: VMs the pass asked for; ``deleted``: the ones it deleted, which the snapshot still
        shows (an idle one deleted is no spare; nor does a deleted VM count against the cluster's limit). Nor is
        an idle VM recorded as another model than its pool's (``zen.scaling.flexrun.foreign``: a primary MIG's spot
        VM after its cluster's models were narrowed to standard): it covered a standard-only job, given no pass, whose
        claims it refused, until the next tick asked for a VM.
        Not ``whole`` (a MIG unread, a call failed): it spares no submission, but its boots still say whether a
        VM now usable calls for a pass (``racing``; without them every job's end ran one, failing again)."""
        index, cluster = vm_index(snapshot.vms), snapshot.cluster  # the policy's grouping, if it made one
        gone = set(deleted)
        spares = {region: sum(vm.name not in gone and not foreign(vm, cluster) for vm in group)
                  if gone or cluster.pools is not None else len(group)
                  for (region, phase), group in index.phases.items() if phase is VmPhase.IDLE}
        if any(spares.values()):  # the queued jobs take them first, those allowing fewest regions first
            for group in sorted(snapshot.demand_groups(), key=lambda g: len(g.regions)):
                left = group.count
                for region in group.regions:
                    take = min(left, spares.get(region, 0))
                    if take:
                        spares[region] -= take
                        left -= take
                        if not left:
                            break
        saturated = sum(snapshot.target_sizes.values()) + added - len(gone) >= snapshot.cluster.max_vms
        booting = added + sum(vm.name not in gone for (_, phase), group in index.phases.items()
                              if phase is VmPhase.BOOTING for vm in group)
        return cls(snapshot.now, {region: n for region, n in spares.items() if n > 0} if whole else {},
                   saturated and whole, booting)

    def covers(self, now: datetime, trust_s: float = COVERAGE_TRUST_S, regions: Iterable[str] | None = None) -> bool:
        """Whether one more job allowing ``regions`` (None: any) is provided for; a covered job takes a
        spare VM of one of them."""
        if (now - self.at).total_seconds() > trust_s:
            return False
        spares = self.spares
        if spares:
            for region in spares if regions is None else regions:
                if spares.get(region, 0) > 0:
                    spares[region] -= 1
                    return True
        return self.saturated


class Taken:
    """The spare VMs each cluster's coverage handed out (when, to a job allowing which regions). An instance serves
    several submissions at once (terraform: concurrency): one covered while a pass of its cluster was planning is
    not in that pass's demand, read before it was queued, and the coverage the pass left offered its VM again, to a
    job then given no pass and no VM until the next tick. ``since`` takes them from a new coverage once more. The
    caller holds the lock that guards its coverages."""

    def __init__(self) -> None:
        self._taken: dict[str, list[tuple[datetime, tuple[str, ...] | None]]] = {}

    def covers(self, cluster: str, coverage: Coverage, now: datetime, regions: Iterable[str] | None = None) -> bool:
        """``coverage.covers``, remembering a spare it hands out (for ``COVERAGE_TRUST_S``: no coverage outlives it)."""
        spare = coverage.spare
        if not coverage.covers(now, COVERAGE_TRUST_S, regions):
            return False
        if coverage.spare < spare:
            kept = [t for t in self._taken.get(cluster, ()) if (now - t[0]).total_seconds() <= COVERAGE_TRUST_S]
            self._taken[cluster] = [*kept, (now, None if regions is None else tuple(regions))]
        return True

    def since(self, cluster: str, coverage: Coverage) -> Coverage:
        """``coverage`` (a pass's, of ``cluster``) less the spares handed out at or after its snapshot: a job covered
        at the very moment may be in its demand too, and is then counted twice (a pass more, never a job left out)."""
        taken = [t for t in self._taken.pop(cluster, ()) if t[0] >= coverage.at]
        for at, regions in taken:
            coverage.covers(at, COVERAGE_TRUST_S, regions)
        if taken:
            self._taken[cluster] = taken
        return coverage
