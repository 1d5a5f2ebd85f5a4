"""Whether a cluster's last pass already provides for one more queued job (``Coverage``), so a
submission can skip a pass, and whether a VM that became usable calls for one (``racing``). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

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
        shows (an idle one deleted is no spare; nor does a deleted VM count against the cluster's limit).
        Not ``whole`` (a MIG unread, a call failed): it spares no submission, but its boots still say whether a
        VM now usable calls for a pass (``racing``; without them every job's end ran one, failing again)."""
        index = vm_index(snapshot.vms)  # the policy's grouping, if it made one
        gone = set(deleted)
        spares = {region: len(group) - (sum(vm.name in gone for vm in group) if gone else 0)
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
