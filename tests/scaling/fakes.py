"""Recording fakes of the scaling ports, for unit tests of ``ClusterManager``'s apply rules without
Compute or Postgres (the integration tests keep the real Compute stand-in and database)."""

from __future__ import annotations

from contextlib import nullcontext
from datetime import datetime

from zen.scaling.model import ClusterSnapshot, Decision, RegionMemory, VmPhase
from zen.scaling.port import FleetFacts, Kept, MigInstance, MigState, MigSummary

_ACTIONS = {VmPhase.BOOTING: ("CREATING", ""), VmPhase.DELETING: ("DELETING", "STOPPING")}


class RecordingMig:
    """A MigPort that keeps a target size and instances, and records every call in ``calls``
    (shared between the MIGs of a cluster, so the order across regions shows too)."""

    def __init__(self, region: str, calls: list, target: int = 0, instances: list[MigInstance] | None = None):
        self.project, self.region, self.name = "test", region, f"zen-test-{region}"
        self.calls, self.target, self.instances = calls, target, list(instances or [])

    def region_summaries(self) -> dict[str, MigSummary]:
        self.calls.append(("region_summaries", self.region))
        return {self.name: MigSummary(self.target, all(i.current_action == "NONE" for i in self.instances))}

    def read(self, since: datetime | None = None, summary: MigSummary | None = None) -> MigState:
        self.calls.append(("read", self.region))
        return MigState(self.target, list(self.instances), [])

    def target_size(self) -> int:
        self.calls.append(("target_size", self.region))
        return self.target

    def resize(self, size: int, together: tuple[int, ...] = ()) -> None:
        self.calls.append(("resize", self.region, size) + ((tuple(together),) if together else ()))
        self.target = size

    def delete_instances(self, names: list[str], zones: dict[str, str | None]) -> None:
        self.calls.append(("delete_instances", self.region, sorted(names)))
        self.instances = [i for i in self.instances if i.name not in names]
        self.target -= len(names)


class FakeFleet:
    """A FleetPort over fixed facts; drains refuse the VMs in ``held`` and are recorded."""

    def __init__(self, facts: FleetFacts, first_seen: datetime):
        self._facts, self._first_seen = facts, first_seen
        self.drained: list[str] = []
        self.recorded: list[tuple[dict[str, RegionMemory], list[Decision]]] = []
        self.kept: list[dict] = []  # failures a pass dropped (keep_failures)

    def cluster_lock(self, cluster: str):
        return nullcontext(Kept())

    def facts(self, cluster: str, arrivals_since: datetime) -> FleetFacts:
        return self._facts

    def memory(self, cluster: str) -> dict[str, RegionMemory]:
        return self._facts.memory

    def see_instances(self, cluster, instances: dict[str, list[str]], now: datetime,
                      billed: dict[str, list[str]] | None = None) -> dict[str, datetime]:
        return {name: self._first_seen for names in instances.values() for name in names}

    def drain_unless_busy(self, vm: str, cluster: str, region: str, now: datetime) -> bool:
        if vm in self._facts.held:
            return False
        self.drained.append(vm)
        return True

    def keep_failures(self, cluster, failures, now) -> None:
        self.kept.append(failures)

    def record(self, cluster, memory, decisions, now, planned=()) -> None:
        self.recorded.append((memory, decisions))


def ports_like(snapshot: ClusterSnapshot, calls: list) -> tuple[dict[str, RecordingMig], FakeFleet]:
    """Recording MIGs and a fleet in the state a snapshot describes (its VMs, targets and demand)."""
    migs = {}
    for region in snapshot.cluster.regions:
        instances = []
        for vm in snapshot.vms:
            if vm.region == region:
                action, status = _ACTIONS.get(vm.phase, ("NONE", "RUNNING"))
                instances.append(MigInstance(vm.name, vm.zone, action, status, vm.creation_error))
        migs[region] = RecordingMig(region, calls, snapshot.target_sizes.get(region, 0), instances)
    held = {vm.name: vm.job_id or "job" for vm in snapshot.vms if vm.phase is VmPhase.BUSY}
    agents = {vm.name: {"state": vm.phase.value, "idle_since": vm.since, "last_seen_at": vm.since}
              for vm in snapshot.vms if vm.phase in (VmPhase.IDLE, VmPhase.BUSY)}
    facts = FleetFacts(snapshot.demand_groups(), held, agents, dict(snapshot.memory), snapshot.arrivals_last_hour)
    return migs, FakeFleet(facts, snapshot.now)
