"""FleetDb: the production ``FleetPort``, ``zen.store.fleet`` over the Database.

Each call is one transaction (the snapshot's facts are read together), except the cluster lock,
which is a session-level advisory lock held on its own session for the whole pass. The planner's
memory is stored as JSON per (cluster, region); it is encoded and decoded here.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import asdict, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping

from zen.scaling.model import Decision, DemandGroup, RegionMemory
from zen.scaling.port import FleetFacts, FleetPort
from zen.store import fleet
from zen.store.encoding import to_json

if TYPE_CHECKING:  # the service needs only the interface; the driver loads in the adapter
    from zen.store.db import Database, Session


def memory_to_json(memory: RegionMemory) -> str:
    return to_json({k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(memory).items()})


def memory_from_json(raw: Mapping[str, Any]) -> RegionMemory:
    values: dict[str, Any] = {}
    for f in fields(RegionMemory):
        value = raw.get(f.name)
        if value is not None and f.name.endswith(("_until", "_at")):
            value = datetime.fromisoformat(value)
        elif isinstance(value, list):
            value = tuple(value)
        if value is not None:
            values[f.name] = value
    return RegionMemory(**values)


class FleetDb:
    def __init__(self, db: Database):
        self._db = db

    def cluster_lock(self, cluster: str) -> AbstractContextManager[bool]:
        return self._db.session_lock(lambda s: fleet.try_cluster_lock(s, cluster),
                                     lambda s: fleet.cluster_unlock(s, cluster))

    def facts(self, cluster: str, arrivals_since: datetime) -> FleetFacts:
        with self._db.transaction() as session:
            demand = tuple(DemandGroup(tuple(r["regions"]), r["jobs"], r["oldest"], r["priority"])
                           for r in fleet.queued_demand(session, cluster))
            held = fleet.held_vms(session, cluster)
            agents = fleet.agents(session, cluster)
            memory = self._memory(session, cluster)
            arrivals = fleet.arrivals_since(session, cluster, arrivals_since)
            drained = fleet.drained_vms(session, cluster)
            last_pass_at = fleet.last_scaling_pass(session, cluster)
        return FleetFacts(demand, held, agents, memory, arrivals, drained=drained, last_pass_at=last_pass_at)

    def shared_load(self, cluster: str) -> tuple[list[dict[str, Any]], dict[str, tuple[int, int]]]:
        with self._db.transaction() as session:
            return fleet.queued_demand_by_gpus(session, cluster), fleet.vm_loads(session, cluster)

    def memory(self, cluster: str) -> dict[str, RegionMemory]:
        with self._db.transaction() as session:
            return self._memory(session, cluster)

    @staticmethod
    def _memory(session: Session, cluster: str) -> dict[str, RegionMemory]:
        return {region: memory_from_json(raw) for region, raw in fleet.scaling_memory(session, cluster).items()}

    def see_instances(self, cluster: str, instances: dict[str, list[str]], now: datetime) -> dict[str, datetime]:
        first_seen: dict[str, datetime] = {}
        with self._db.transaction() as session:
            for region, names in instances.items():
                first_seen.update(fleet.see_instances(session, cluster, region, names, now))
        return first_seen

    def drain_unless_busy(self, vm: str, cluster: str, region: str, now: datetime) -> bool:
        with self._db.transaction() as session:
            return fleet.drain_unless_busy(session, vm, cluster, region, now)

    def record(self, cluster: str, memory: dict[str, RegionMemory], decisions: list[Decision], now: datetime) -> None:
        with self._db.transaction() as session:
            for region, value in memory.items():
                fleet.save_scaling_memory(session, cluster, region, memory_to_json(value), now)
            for decision in decisions:
                fleet.add_scaling_decision(session, cluster=cluster, region=decision.region,
                                           action=decision.action.value, count=decision.count, vm=decision.vm,
                                           reason=decision.reason, now=now)


_ADAPTS: type[FleetPort] = FleetDb  # the type checker holds the adapter to its port
