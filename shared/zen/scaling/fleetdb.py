"""FleetDb: the production ``FleetPort``, ``zen.store.fleet`` over the Database.

Each call is one transaction (the snapshot's facts are read together), except the cluster lock,
which is a session-level advisory lock held on its own session for the whole pass. The planner's
memory is stored as JSON per (cluster, pool key); it is encoded and decoded here. Demand comes grouped
from SQL by (priority, regions, accepted models, start bound); ``demand_groups`` turns each group's
regions and models into the pool keys the planner plans (``zen.core.provisioning``), in the cluster's
order: with one model, its regions, as before models existed.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import asdict, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping

from zen.core.cluster_config import ClusterConfig
from zen.core.config import ZenConfig
from zen.core.prices import Pricing, snapshot
from zen.core.provisioning import accepted_models, model_of_pool, only_model, outlasts_flex, pool_key, region_of
from zen.scaling.egress import Inputs, weighs_inputs
from zen.scaling.model import (Action, Decision, DemandGroup, DemandKey, ErrorKind, MigError, RegionMemory, Timing,
                               fold_demand)
from zen.scaling.port import ARRIVALS_WINDOW, FleetFacts, FleetPort, Hold
from zen.store import fleet
from zen.store.encoding import to_json
from zen.store.usage import read_snapshot

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


def failure_to_json(error: MigError) -> str:
    return to_json({**asdict(error), "kind": error.kind.value, "at": error.at.isoformat()})


def failure_from_json(raw: Mapping[str, Any]) -> MigError:
    return MigError(**{**raw, "kind": ErrorKind(raw["kind"]), "at": datetime.fromisoformat(raw["at"])})


def pools_of_row(row: Mapping[str, Any], cluster: ClusterConfig | None) -> tuple[tuple[str, ...], float | None]:
    """A demand row's pools (its ``regions`` x the models its ``provisioning`` accepts, in the cluster's
    order) and start bound: its jobs' own ``max_start_wait_s``, None when they named none (the planner
    then holds them to the cluster's, ``Timing.max_start_wait_s``, and ranks by ``cost_slack_s``: a bound
    a job names widens its choice, the default does not); ``cluster`` None: its regions. No flex-start pool
    for a row whose longest named ``max_runtime_s`` outlasts a flex-start VM's run (no such VM takes it); none
    at all for gangs whose cluster can no longer hold them (``ClusterConfig.nodes_problem``: its limits lowered
    since: no VM is asked for, nor kept idle, for them)."""
    regions, wait = tuple(row["regions"]), row.get("max_start_wait_s")
    bound = None if wait is None else float(wait)
    if cluster is None:
        return regions, bound
    if cluster.nodes_problem(row.get("nodes") or 1) is not None:
        return (), bound
    models, primary = accepted_models(row.get("provisioning"), cluster.provisioning), cluster.provisioning[0]
    if outlasts_flex(row.get("longest"), cluster.flex_start_run_s):
        models = tuple(m for m in models if m != "flex-start")
    return tuple(pool_key(r, m, primary) for r in regions for m in models), bound


def demand_groups(rows: list[dict[str, Any]], cluster: ClusterConfig | None,
                  data: ZenConfig | None = None) -> tuple[DemandGroup, ...]:
    """The planner's demand from ``queued_demand``'s rows (a handful, however long the queue): each row's
    pools are its regions x the models its jobs accept, region by region, each region's models in the
    cluster's order; its start bound the jobs' own (None: the cluster's, see ``pools_of_row``). Rows that
    come to the same pools and bound are one group, the jobs past their start bound (``late``) one apart: the
    planner ranks a group by its oldest job's wait. A group no model of the cluster serves any longer
    (the configuration changed while it waited) is left out. ``cluster`` None: pools are the regions. ``data``: the
    configuration whose bucket locations and egress rates price the groups' inputs (``zen.scaling.egress``); None: not
    priced."""
    parts: tuple[list[Any], list[Any]] = ([], [])  # (within their bound, past it)
    inputs = Inputs()
    for row in rows:
        pools, wait = pools_of_row(row, cluster)
        if pools:
            nodes = row.get("nodes") or 1  # a gang: its VMs not claimed yet (``need`` each)
            key = (row["priority"], pools, wait, _every(row), nodes, (row.get("need") or 0) if nodes > 1 else 0,
                   only_model(row.get("provisioning")))  # no idle VM recorded as another is theirs (flexrun.hidden)
            parts[bool(row.get("late"))].append((key, row.get("vms", row["jobs"]), row["oldest"], _seconds(row.get("longest"))))
            inputs.add((bool(row.get("late")), key), row["jobs"], row.get("inputs"))
    late, within = fold_demand(parts[1]), fold_demand(parts[0])
    if data is None:
        return late + within

    def key_of(past: bool) -> Callable[[DemandGroup], tuple[bool, DemandKey]]:  # the key its rows were added under
        return lambda g: (past, (g.priority, g.regions, g.max_wait_s, g.checkpoint_every_s, g.gang, g.part, g.accepts))
    return inputs.priced(data, late, key_of(True)) + inputs.priced(data, within, key_of(False))


def _every(row: dict[str, Any]) -> float | None:
    """How often the row's jobs save their work (the jobs' ``checkpoint_every_s`` column), None: they do not."""
    return _seconds(row.get("checkpoint_every_s"))


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


class FleetDb:
    def __init__(self, db: Database, clusters: Mapping[str, ClusterConfig] | None = None,
                 pricing: Pricing | None = None, data: ZenConfig | None = None):
        """``pricing``: the configuration's prices, by which each billed segment of an instance is priced as it
        begins (the fleet's dollars: ``zen.store.fleet.see_instances``); None: no price kept.
        ``data``: the configuration that prices the demand's inputs in egress (``demand_groups``); None: not priced."""
        self._db, self._data = db, data
        self._clusters = clusters or {}  # name -> its configuration: the pools of its demand (demand_groups)
        self._pricing = pricing
        self._failures: dict[str, datetime] = {}  # cluster -> when this instance last recorded a failed pass

    def cluster_lock(self, cluster: str) -> AbstractContextManager[Hold]:
        return self._db.session_lock(lambda s: fleet.try_cluster_lock(s, cluster),
                                     lambda s: fleet.cluster_unlock(s, cluster))

    def _bound_s(self, cluster: str) -> int:
        """The start bound of the cluster's jobs that name none (its ``max_start_wait_s``, as the planner's)."""
        config = self._clusters.get(cluster)
        return int(config.max_start_wait_s if config is not None else Timing().max_start_wait_s)

    def facts(self, cluster: str, now: datetime) -> FleetFacts:
        """The cluster's facts as of one moment (``read_snapshot``): read statement by statement, a gang node's claim
        committed between the demand and the VMs held was in one and not the other (the gang needing the node its
        claiming VM, busy, could no longer be), and the pass deleted the VM booting for the gang's next node."""
        with self._db.transaction() as session:
            read_snapshot(session)
            rows = fleet.queued_demand(session, cluster, now, self._bound_s(cluster), weighs_inputs(self._data))
            demand = demand_groups(rows, self._clusters.get(cluster), self._data)
            held = fleet.held_vms(session, cluster)
            agents = fleet.agents(session, cluster)
            heard = next((a["heard_since"] for a in agents.values()), None) if agents else fleet.heard_since(
                session.one("read_tick_clock"), [])  # (each agent's row carries it: zen.store.fleet.agents)
            memory = self._memory(session, cluster)
            arrivals = fleet.arrivals_since(session, cluster, now - ARRIVALS_WINDOW)
            drained = fleet.drained_vms(session, cluster)
            last_pass_at = fleet.last_scaling_pass(session, cluster)
            failures = tuple((r["id"], r["pool"], failure_from_json(r["failure"]))
                             for r in fleet.kept_request_failures(session, cluster))
        return FleetFacts(demand, held, agents, memory, arrivals, drained=drained, last_pass_at=last_pass_at,
                          heard_since=heard, failures=failures,
                          oldest_queued=min((r["oldest"] for r in rows), default=None))  # demand or not

    def shared_load(self, cluster: str, now: datetime) -> tuple[list[dict[str, Any]], dict[str, tuple[int, int]]]:
        with self._db.transaction() as session:
            rows = fleet.queued_demand_by_gpus(session, cluster, now, self._bound_s(cluster))
            loads = fleet.vm_loads(session, cluster)
        config = self._clusters.get(cluster)  # each row's regions become its pools, as in demand_groups
        return [{**row, "regions": pools, "max_wait_s": wait} for row in rows
                for pools, wait in [pools_of_row(row, config)] if pools], loads

    def queue_heads(self, clusters: list[str]) -> dict[str, tuple[int, datetime]]:
        """Cluster -> (priority, queued_at) of its most urgent queued job (``zen.store.fleet.queue_heads``)."""
        with self._db.transaction() as session:
            return fleet.queue_heads(session, clusters)

    def memory(self, cluster: str) -> dict[str, RegionMemory]:
        with self._db.transaction() as session:
            return self._memory(session, cluster)

    @staticmethod
    def _memory(session: Session, cluster: str) -> dict[str, RegionMemory]:
        return {region: memory_from_json(raw) for region, raw in fleet.scaling_memory(session, cluster).items()}

    def see_instances(self, cluster: str, instances: dict[str, list[str]], now: datetime,
                      billed: dict[str, list[str]] | None = None) -> dict[str, datetime]:
        first_seen: dict[str, datetime] = {}
        config = self._clusters.get(cluster)
        with self._db.transaction() as session:
            for pool, names in instances.items():  # each pool's model as configured now (zen.core.provisioning)
                model = model_of_pool(pool, config.provisioning) if config is not None else None
                first_seen.update(fleet.see_instances(session, cluster, pool, names, now,
                                                      None if billed is None else billed.get(pool, []), model,
                                                      self._price(config, pool, model)))
        return first_seen

    def _price(self, config: ClusterConfig | None, pool: str, model: str | None) -> fleet.PoolPrice | None:
        """What prices ``pool``'s VMs now (``zen.core.prices.effective``'s order: configured, catalog, snapshot)."""
        if self._pricing is None or config is None or model is None:
            return None
        machine, region = config.machine_type, region_of(pool)
        fixed, fallback = self._pricing.table().lookup(machine, region, model), snapshot().lookup(machine, region, model)
        return fleet.PoolPrice(machine, fixed.usd_per_hour if fixed else None, self._pricing.catalog,
                               fallback.usd_per_hour if fallback else None)

    def drain_unless_busy(self, vm: str, cluster: str, region: str, now: datetime) -> bool:
        with self._db.transaction() as session:
            return fleet.drain_unless_busy(session, vm, cluster, region, now)

    def record(self, cluster: str, memory: dict[str, RegionMemory], decisions: list[Decision], now: datetime,
               planned: Collection[int] = ()) -> None:
        with self._db.transaction() as session:
            fleet.forget_request_failures(session, cluster, list(planned))
            for region, value in memory.items():
                fleet.save_scaling_memory(session, cluster, region, memory_to_json(value), now)
            for decision in decisions:
                fleet.add_scaling_decision(session, cluster=cluster, region=decision.region,
                                           action=decision.action.value, count=decision.count, vm=decision.vm,
                                           reason=decision.reason, now=now)

    def keep_failures(self, cluster: str, failures: Mapping[str, list[MigError]], now: datetime) -> None:
        with self._db.transaction() as session:
            for pool, errors in failures.items():
                for error in errors:
                    fleet.keep_request_failure(session, cluster, pool, failure_to_json(error), now)

    def record_failure(self, cluster: str, exc: Exception, now: datetime) -> bool:
        """A failed pass in the cluster's decisions (an ERROR row: ``zen explain CLUSTER``), at most once a minute per
        instance: it was in the logs alone, and a scaling that had stopped (a permission refused to every pass) showed
        its last decisions as if nothing had gone wrong. Nothing is recorded when the database itself fails. Whether
        this one was recorded (the log-based metric counts it then, as the table does)."""
        if (last := self._failures.get(cluster)) is not None and (now - last).total_seconds() < 60:
            return False
        self._failures[cluster] = now
        why = f"scaling pass failed: {type(exc).__name__}: {str(exc)[:500]} (the next pass tries again; see the logs)"
        try:
            self.record(cluster, {}, [Decision(Action.ERROR, None, why)], now)
        except Exception:  # noqa: BLE001 - the database is what fails: the log has the pass's error
            return False
        return True


_ADAPTS: type[FleetPort] = FleetDb  # the type checker holds the adapter to its port
