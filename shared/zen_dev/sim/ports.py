"""The simulated world behind the production manager's ports (``zen.scaling.port``).

``Simulation`` runs the production ``ClusterManager`` on every pass; what the manager would get from
Compute and Postgres it gets from here: ``SimMigPort`` (a ``MigPort`` over one ``SimMig``) and
``SimFleet`` (a ``FleetPort`` over the world's jobs, VMs and agents). Compute calls are counted as
``zen.adapters.compute.MigManager`` makes them.
What they answer: docs/reference/simulator.md#what-the-simulator-models
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from contextlib import nullcontext
from datetime import datetime
from typing import Collection, Mapping, Sequence

from zen.scaling.model import Decision, DemandGroup, ErrorKind, MigError, RegionMemory, VmPhase
from zen.scaling.port import ARRIVALS_WINDOW, FleetFacts, Kept, MigInstance, MigState, MigSummary, resize_requests
from zen_dev.sim.state import SimClusterState, SimMig, SimVm

_EMPTY = MigState(0, [], [])
_LOCKED = nullcontext(Kept())  # one pass at a time: the simulated world is single-threaded


def _instance(name: str, zone: str | None, action: str, status: str, error: ErrorKind | None) -> MigInstance:
    """``MigInstance(name, zone, action, status, error)`` without the frozen ``__init__``, which sets
    each field through ``object.__setattr__`` (half the cost): a long replay lists millions."""
    made = object.__new__(MigInstance)
    made.__dict__.update(name=name, zone=zone, current_action=action, status=status, creation_error=error)
    return made


def _errors_like(region: str, at: datetime, count: int) -> dict:
    """The fields of ``MigError(region, STOCKOUT, at, instance, count)`` but the instance's (see :func:`_error`)."""
    return {"region": region, "kind": ErrorKind.STOCKOUT, "at": at, "instance": None, "count": count, "detail": None,
            "quota": None}


def _error(like: dict, instance: str) -> MigError:
    """``MigError(region, STOCKOUT, at, instance, count)`` with the other fields ``like`` those (:func:`_errors_like`),
    the same way as :func:`_instance`: instances waiting together fail alike, and a long replay reports millions."""
    made = object.__new__(MigError)
    fields = made.__dict__
    fields.update(like)
    fields["instance"] = instance
    return made


_FACT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(FleetFacts) if f.default is not dataclasses.MISSING}


def _facts(demand: tuple[DemandGroup, ...], held: dict, agents: dict, memory: dict, arrivals: int,
           changed: tuple | None) -> FleetFacts:
    """``FleetFacts(demand, held, agents, memory, arrivals, changed)``, the same way as :func:`_instance`
    (one per pass: the planner's memory is new after each)."""
    made = object.__new__(FleetFacts)
    made.__dict__.update(_FACT_DEFAULTS, demand=demand, held=held, agents=agents, memory=memory, arrivals=arrivals,
                         changed=changed)
    return made


# Each sets every field: they follow the dataclasses.
assert list(MigInstance.__dataclass_fields__) == ["name", "zone", "current_action", "status", "creation_error"]
assert list(MigError.__dataclass_fields__) == ["region", "kind", "at", "instance", "count", "detail", "quota"]
assert list(FleetFacts.__dataclass_fields__) == ["demand", "held", "agents", "memory", "arrivals", "changed", "drained",
                                                 "last_pass_at", "heard_since", "failures", "oldest_queued"]


def views(world, vm: SimVm) -> tuple[MigInstance, dict | None]:
    """The VM as its MIG lists it, and what its agent last said (None before it is usable), cached
    on the VM until it changes; a failure not yet visible in listErrors is not cached."""
    if vm.view is not None:
        return vm.view
    phase = vm.phase
    if vm.created_s is None:  # waiting for capacity
        visible = vm.error is not None and world.now >= vm.wait_since + world.error_delay
        instance = _instance(vm.name, None, "CREATING", "", vm.error if visible else None)
        if not visible and vm.error is not None:
            return instance, None
        view = (instance, None)
    elif phase is VmPhase.DELETING:
        view = (_instance(vm.name, vm.zone, "DELETING", "STOPPING", None), None)
    elif phase is VmPhase.BOOTING:  # RUNNING from its running_s on (zen_dev.sim.world touches it then)
        running = world.now >= vm.running_s
        view = (_instance(vm.name, vm.zone, "NONE" if running else "CREATING", "RUNNING" if running else "STAGING",
                          None), None)
    else:
        since = world.dt(vm.since)
        agent = {"state": phase.value, "idle_since": since if phase is VmPhase.IDLE else None, "last_seen_at": since}
        view = (_instance(vm.name, vm.zone, "NONE", "RUNNING", None), agent)
    vm.view = view
    return view


class _Cut:
    """Compares failures' simulated times with a moment as their datetimes compare (``world.dt``
    rounds to microseconds): by the seconds, unless too close to tell."""

    def __init__(self, world, seconds: float, moment: datetime):
        self.world, self.seconds, self.moment = world, seconds, moment

    def count(self, times: tuple[float, ...]) -> int:
        """How many of ``times`` (ascending) have ``world.dt(t) <= moment``."""
        i = bisect.bisect_right(times, self.seconds - 1e-5)
        while i < len(times) and times[i] <= self.seconds + 1e-5 and self.world.dt(times[i]) <= self.moment:
            i += 1
        return i


class SimMigPort:
    """A ``MigPort`` over one simulated regional MIG."""

    def __init__(self, world, mig: SimMig, project: str = "sim"):
        self.project, self.region, self.name = project, mig.region, mig.name
        self._world, self._mig = world, mig
        self._summary: tuple = (None, None, None)  # (target, stable, what region_summaries returned)
        self._settled: MigState | None = None  # the last read of the MIG with every instance settled
        self._after: _Cut | None = None  # the last ``since`` errors were read after

    def _calls(self, n: int) -> None:
        self._world.result.api_calls += n

    def region_summaries(self) -> dict[str, MigSummary]:
        self._calls(1)
        mig = self._mig
        stable = not mig.vms or self._listing()[1]
        target, was_stable, last = self._summary
        if target != mig.target or was_stable != stable:
            last = {mig.name: MigSummary(mig.target, stable)}
            self._summary = (mig.target, stable, last)
        return last  # the same values as last time: the same (unchanged) objects

    def read(self, since: datetime | None = None, summary: MigSummary | None = None) -> MigState:
        if summary is not None and summary.target_size == 0 and summary.stable:
            return _EMPTY
        mig = self._mig
        instances, stable = self._listing()
        settled = stable and len(instances) == mig.target
        self._calls((summary is None) + 1 + (not settled))
        if not settled:
            return MigState(mig.target, instances, self._errors(since))
        last = self._settled  # no errors to read: the last such state again while the listing is
        if last is None or last.instances is not instances or last.target_size != mig.target:
            last = self._settled = MigState(mig.target, instances, [])
        return last

    def _listing(self) -> tuple[list[MigInstance], bool]:
        """The MIG's instances and whether none is being created or deleted; kept until one of its
        VMs changes (``SimVm.touch``) or a failure becomes visible."""
        mig, world = self._mig, self._world
        listing = mig.listing
        if listing is not None and world.now < listing[2]:
            return listing[0], listing[1]
        instances, stable, until = [], True, math.inf
        for vm in mig.vms.values():
            view = vm.view or views(world, vm)
            instances.append(view[0])
            stable = stable and view[0].current_action == "NONE"
            if vm.view is None:  # a failure not yet visible: list again once it is
                until = min(until, vm.wait_since + world.error_delay)
        mig.listing = (instances, stable, until)
        return instances, stable

    def _errors(self, since: datetime | None) -> list[MigError]:
        """Failures visible by now (``list_errors_delay_s`` after them) and after ``since``; each once.
        An instance's failures are folded into one ``MigError`` (``count`` of them, ``at`` the last)."""
        world, mig = self._world, self._mig
        visible_until = world.now - world.error_delay
        if mig.waiting and visible_until > mig.errors_until:
            world._retry_errors(mig, mig.errors_until, visible_until, mig.errors)
            mig.errors_until = visible_until
        if not mig.errors:
            return []
        horizon = world._horizon_at
        if horizon is None or horizon.seconds != visible_until:  # one per instant, for every MIG read then
            horizon = world._horizon_at = _Cut(world, visible_until, world.dt(visible_until))
        after = self._after
        if since is None:
            after = None
        elif after is None or after.moment != since:  # the planner's memory: the same moment pass after pass
            after = self._after = _Cut(world, (since - world.start).total_seconds(), since)
        out, later, seen = [], {}, {}
        for name, times in mig.errors.items():  # each instance's failure times are ascending
            # Instances waiting together have equal times (often the same tuple): counted once.
            counted = seen.get(times)
            if counted is None:
                visible = horizon.count(times)
                shown = visible - (0 if after is None else min(visible, after.count(times)))
                like = _errors_like(mig.key, world.dt(times[visible - 1]), shown) if shown > 0 else None
                counted = seen[times] = (like, times[visible:])
            like, rest = counted
            if like is not None:
                out.append(_error(like, name))
            if rest:
                later[name] = rest
        mig.errors = later
        return out

    def target_size(self) -> int:
        self._calls(1)
        return self._mig.target

    def resize(self, size: int, together: Sequence[int] = ()) -> None:
        """As production's: a flex-start MIG asks in one request per unit of ``together`` that fits, then
        one per VM of the rest (as ``FlexStartMig.resize``: a target size read, then one insert call per request);
        any other grows by its target size, ``together`` ignored."""
        mig, world = self._mig, self._world
        if size < mig.target:
            raise NotImplementedError("the simulated MIG only grows by resize (ClusterManager never shrinks one)")
        grow, flex = size - mig.target, mig.model == "flex-start"
        mig.target = size
        requests = resize_requests(together if flex else (), grow)
        self._calls(1 + len(requests) if flex else 2)
        for count in requests:
            world._create(mig, count)

    def delete_instances(self, names: list[str], zones: dict[str, str | None]) -> None:
        if not names:
            return
        self._calls(2 * math.ceil(len(names) / 1000))  # as the adapter: a call per 1000 (MAX_DELETE_PER_CALL)
        mig, world = self._mig, self._world
        for name in names:
            vm = mig.vms.get(name)
            if vm is None or vm.phase is VmPhase.DELETING:
                world.result.unknown_deletes += 1
            elif vm.job is not None:  # never happens through the manager, which drains first
                world.result.busy_delete_attempts += 1
            else:
                world._delete(vm)


class SimFleet:
    """A ``FleetPort`` over the simulated world's jobs, VMs and agents (every cluster)."""

    def __init__(self, world):
        self._world = world

    def cluster_lock(self, cluster: str):
        return _LOCKED

    def facts(self, cluster: str, now: datetime) -> FleetFacts:
        world, state = self._world, self._world.clusters[cluster]
        if state.fleet_view is None or state.changed:
            # The VMs that changed since the last facts looked at again; new dicts only where an entry
            # differs (the manager keeps its views of the VMs while it gets the same dicts).
            held, agents = state.fleet_view or ({}, {})
            new_held = new_agents = None
            for name in (state.vms if state.fleet_view is None else state.changed):
                vm = state.vms.get(name)  # None: gone
                holds = None if vm is None else (vm.job or vm.part)  # a gang's part is held too
                job = None if holds is None else holds.spec.job_id
                agent = None if vm is None else (vm.view or views(world, vm))[1]
                if held.get(name) != job:
                    new_held = dict(held) if new_held is None else new_held
                    new_held[name] = job
                    if job is None:
                        del new_held[name]
                if agents.get(name) is not agent:
                    new_agents = dict(agents) if new_agents is None else new_agents
                    new_agents[name] = agent
                    if agent is None:
                        del new_agents[name]
            if state.fleet_view is not None:  # what changed since, for the manager (FleetFacts.changed)
                state.fleet_since = (held, agents, frozenset(state.changed))
            state.changed = {}
            state.fleet_view = (held if new_held is None else new_held, agents if new_agents is None else new_agents)
        held, agents = state.fleet_view
        arrivals = state.arrivals
        cutoff = (now - ARRIVALS_WINDOW - world.start).total_seconds()
        while arrivals and arrivals[0] < cutoff:
            arrivals.popleft()
        facts, demand = state.facts_view, self._demand(state)
        if (facts is None or facts.demand is not demand or facts.held is not held or facts.agents is not agents
                or facts.memory is not state.memory or facts.arrivals != len(arrivals)):
            facts = state.facts_view = _facts(demand, held, agents, state.memory, len(arrivals), state.fleet_since)
        return facts  # the last one again when all of it is

    def _demand(self, state: SimClusterState) -> tuple[DemandGroup, ...]:
        now = self._world.now
        if state.demand_view is None or now >= state.demand_until:
            # The oldest of a group is production's min(queued_at): each job's ``queued_s``, when it was
            # last queued (a job widened from near its data joins its wider group last and may be older).
            # Jobs past their start bound apart from those within it, as production's queued_demand splits them.
            cluster_bound = state.start_bound_s
            groups, until = [], math.inf
            for (priority, regions, (every, wait)), jobs in state.groups.items():
                if not jobs:
                    continue
                bound = cluster_bound if wait is None else wait  # a job's own, else its cluster's
                fresh = [t for t in jobs.values() if now - t < bound]
                late = [t for t in jobs.values() if now - t >= bound] if len(fresh) < len(jobs) else []
                for part in (late, fresh):
                    if part:
                        groups.append(DemandGroup(regions, len(part), self._world.dt(min(part)), priority,
                                                  max_wait_s=wait, checkpoint_every_s=every))
                if fresh:
                    until = min(until, min(fresh) + bound)
            for gang in state.gangs.values():  # gangs' alike
                bound = cluster_bound if gang.terms[1] is None else gang.terms[1]
                if now - gang.queued_s < bound:
                    until = min(until, gang.queued_s + bound)
            state.demand_view, state.demand_until = tuple(groups) + self._world.gangs.demand(state), until
        return state.demand_view

    def memory(self, cluster: str) -> dict[str, RegionMemory]:
        return self._world.clusters[cluster].memory

    def see_instances(self, cluster: str, instances: dict[str, list[str]], now: datetime,
                      billed: dict[str, list[str]] | None = None) -> dict[str, datetime]:
        """The same dict as last time when given the same name lists (the manager's, kept while a
        MIG's listing is): nothing new to see, and the manager reuses its views of the VMs. ``billed``: the
        world bills its VMs itself (``zen_dev.sim.instances``)."""
        state = self._world.clusters[cluster]
        last = state.seen_view
        if last is not None and last[0].keys() == instances.keys():
            changed = [(last[0][region], names) for region, names in instances.items() if last[0][region] is not names]
            if not changed:
                return last[1]
            out = dict(last[1])  # a new dict: only the regions whose names changed looked at again
            for gone, _ in changed:
                for name in gone:
                    del out[name]
        else:
            out, changed = {}, [((), names) for names in instances.values()]
        vms = state.vms
        for _, names in changed:
            for name in names:
                vm = vms[name]
                if vm.first_seen is None:
                    vm.first_seen = now
                out[name] = vm.first_seen
        state.seen_view = (dict(instances), out)
        return out

    def drain_unless_busy(self, vm: str, cluster: str, region: str, now: datetime) -> bool:
        found = self._world.clusters[cluster].vms.get(vm)
        return found is None or (found.job is None and found.part is None)

    def keep_failures(self, cluster: str, failures: Mapping[str, list[MigError]], now: datetime) -> None:
        """Never asked: the simulator's lock is always free and its passes read the MIGs themselves, so no pass drops
        a read (``zen.scaling.reported``)."""
        raise NotImplementedError("the simulator's passes drop no read")

    def record(self, cluster: str, memory: dict[str, RegionMemory], decisions: list[Decision], now: datetime,
               planned: Collection[int] = ()) -> None:
        state = self._world.clusters[cluster]
        state.memory = {**state.memory, **memory}
