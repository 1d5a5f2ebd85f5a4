"""How ``ClusterManager`` sees one MIG instance (a ``Vm``, from the listing and Zen's records), and
which VMs on their way out it must delete itself, whatever the policy planned (``leftovers``).

``classify`` and ``leftovers`` are pure functions over plain data; ``VmViews`` keeps their results per
VM between passes while the inputs are the same.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Callable, Iterable, KeysView, Mapping

from zen.scaling.model import RegionVms, Vm, VmPhase, remember_index, vm_index
from zen.scaling.port import FleetFacts, MigInstance

# An instance GCE holds stopped, suspended or under repair, or takes down (PENDING_STOP: shutting down gracefully;
# DEPROVISIONING: halted, its quota and disks being released). Not booting: PROVISIONING, STAGING, PENDING (a
# flex-start VM waiting for capacity), "" before a VM exists.
HALTED = frozenset({"PENDING_STOP", "STOPPING", "DEPROVISIONING", "STOPPED", "SUSPENDING", "SUSPENDED", "TERMINATED",
                    "REPAIRING"})
# The statuses of a VM GCE has given capacity to: PENDING waits for it, and one ``HALTED`` is on its way down.
HOLDS_CAPACITY = frozenset({"PROVISIONING", "STAGING", "RUNNING"})
Agent = Mapping[str, Any]  # an agent's last word (``FleetFacts.agents``): state, idle_since, last_seen_at, ...
# A VM as a pass read it: (instance, first seen, the job it holds, its agent, its Vm, drained).
View = tuple[MigInstance, datetime, str | None, Agent | None, Vm, bool, float | None]
# A region's part: (its instances as read, their Vms, zones, names, and per name its View).
Part = tuple[list[MigInstance], RegionVms, dict[str, str | None], KeysView[str], dict[str, View]]
# The last pass's inputs (regions, their listings, first seen, held, agents), VMs, zones and drains.
Pass = tuple[tuple[str, ...], tuple[list[MigInstance], ...], dict[str, datetime] | None, Mapping[str, str] | None,
             Mapping[str, Agent] | None, tuple[Vm, ...], dict[str, str | None], frozenset[str]]


def classify(instance: MigInstance, region: str, first_seen: datetime, held: Mapping[str, str],
             agents: Mapping[str, Agent], drained: bool = False, rebooted: float | None = None) -> Vm:
    """The planner's view of one instance. DELETING: going away, not supply, counted against the limits
    until gone. A *drained* instance (a scale-down marked it and refuses its claims) is DELETING even
    while the MIG still lists it as running: its delete may have failed (or the pass died between the
    drain and the delete), and as idle supply a queued job would wait on it forever, every claim refused.
    A RETIRED agent takes no more jobs (a pull limit, ``zen.agent.limits``): not supply, deleted next
    (unless the word is a recreated VM's predecessor's, as a STOPPING may be: below).
    An agent's STOPPING (its VM is shutting down, e.g. preempted) counts only while the instance is
    RUNNING with no current action: a preempted spot VM is recreated by its MIG under the same name
    (``instance_termination_action = DELETE``), and the new instance's own state decides (CREATING:
    booting, a probe or a strike in a stockout; not a ghost counted against the limits forever). Nor
    once that instance is RUNNING (``rebooted``: the last plan saw it booting, since then, epoch seconds)
    until its new agent speaks: the STOPPING was its predecessor's, and the VM its region gave back is the
    requeued job's. Any word older than that boot is its predecessor's (its STOPPING lost as the VM went):
    the recreated VM boots, not an idle or busy VM silent since, which would be deleted as silent.
    An instance GCE holds ``HALTED`` with no action of its MIG's, whose agent spoke (it ran: no boot failure), is
    DELETING too: it was taken for a boot stuck after it got capacity, deleted five passes later as one whose
    "agent was never heard", and its region struck as one whose VMs never come up (its blocks growing to hours).
    ``started``: a booting instance that got capacity (RUNNING, or PROVISIONING or STAGING with no creation error: the
    MIG is not retrying it), so it is billed (from RUNNING) and no free probe. Not one PENDING (a flex-start VM waiting
    for capacity), nor one a MIG recreates while its VM is on its way down (STOPPING, DEPROVISIONING, TERMINATED):
    taken for a VM that got capacity, a recreated spot VM waiting for its place stood for a ``min_vms`` warm VM
    (``probes.with_capacity``) and for GPUs its quota holds (``zen.scaling.quotas``).
    ``heard_at``: when the agent was last heard, its row's ``last_seen_at`` (when missing, the
    instance's first sighting), or its ``heard_since`` when later: when Zen could hear again after an
    outage of its own (``zen.store.fleet.agents``); the planner judges the silence (``Timing.agent_silence_s``)."""
    agent = agents.get(instance.name)
    state = agent["state"] if agent else None
    predecessors = agent is not None and rebooted is not None and (  # the word of the VM its MIG recreated
        state == "STOPPING" or (agent["last_seen_at"] or first_seen).timestamp() <= rebooted)
    retired = state == "RETIRED" and not predecessors  # (a recreated VM's predecessor retired: not it)
    halted = (instance.status in HALTED and instance.current_action == "NONE" and agent is not None and not predecessors
              and instance.name not in held)  # (a job's VM: its job's reports or silence decide)
    if instance.deleting or drained or retired or halted or (state == "STOPPING" and instance.running and not predecessors):
        phase, since = VmPhase.DELETING, first_seen
    elif instance.name in held:
        phase, since = VmPhase.BUSY, first_seen
    elif not instance.running or agent is None or predecessors:
        # No VM yet, or its agent has not spoken yet. One whose agent spoke is being recreated (a
        # preempted spot VM, same name): its boot counts from the agent's last word, not from when
        # the name was first seen (a day-old name would look stuck at once and strike its region).
        since = max(first_seen, agent["last_seen_at"] or first_seen) if agent else first_seen
        phase = VmPhase.BOOTING
    elif agent["state"] == "IDLE":
        phase, since = VmPhase.IDLE, agent["idle_since"] or agent["last_seen_at"] or first_seen
    else:
        phase, since = VmPhase.BUSY, agent["last_seen_at"] or first_seen  # the agent says busy (e.g. claiming)
    heard = None
    if agent is not None:
        heard = agent["last_seen_at"] or first_seen
        back = agent.get("heard_since")
        heard = back if back is not None and back > heard else heard
    booting = phase is VmPhase.BOOTING
    return Vm(instance.name, region, phase, since, zone=instance.zone, job_id=held.get(instance.name),
              creation_error=instance.creation_error if booting else None,
              started=booting and (instance.status == "RUNNING"
                                   or instance.status in HOLDS_CAPACITY and not instance.creation_error),
              heard_at=heard, running=booting and instance.status == "RUNNING",
              retiring=phase is VmPhase.DELETING and (drained or retired),
              first_heard_at=agent.get("first_seen_at") if agent else None,
              running_at=agent.get("running_at") if agent else None, model=agent.get("model") if agent else None)


def leftovers(deleting: Iterable[Vm], view_of: Callable[[Vm], View | None], planned: set[str],
              silent_before: datetime | None, restarts: Callable[[Vm], bool]) -> list[tuple[Vm, str]]:
    """The DELETING VMs that nobody else deletes, each with why: ``retired`` (its agent is RETIRED: it
    only waits to be deleted), ``drained`` (a scale-down drained it and its delete failed: deleted again
    every pass until it leaves its MIG; the drain stays, a delete that timed out may still go through; so even
    once its agent, its claims refused, says RETIRED),
    or ``silent`` (its agent said STOPPING, the VM going away, and was not heard since ``silent_before``
    while its instance still runs: the VM did not go, and would be billed for ever); a ``HALTED`` one (the reason
    itself), but one that ``restarts`` (a standard VM: GCE restarts it under its name after a host event, its MIG
    doing nothing meanwhile) only once its agent was not heard since ``silent_before``, as for ``silent`` (the VM
    comes back and takes the next job; deleted at once, that job would wait for a new VM's boot, or for capacity in a
    stockout); and the BUSY ones whose agent still runs a job that ended before ``silent_before`` (the reason
    itself): none of Zen's STOPs reached it (its control path broken), and it would run until the job's own limit,
    billed for nothing.
    Each holds no job, the plan does not delete it, and its MIG is not deleting it.
    ``view_of``: a VM's (instance, first seen, job, agent, Vm, drained) as the manager read it."""
    out = []
    for vm in deleting:
        view = view_of(vm)
        if vm.job_id is not None or vm.name in planned or view is None or view[0].deleting:
            continue
        state = view[3]["state"] if view[3] is not None else None
        if state == "RETIRED" or view[5]:  # a drained VM's agent retires too (its claims refused): drained, by Zen
            out.append((vm, "drained" if view[5] else "retired"))
        elif view[0].status in HALTED and view[0].current_action == "NONE":  # its agent was heard: it ran, no boot
            if restarts(vm) and silent_before is not None and vm.heard_at is not None and vm.heard_at >= silent_before:
                continue  # (a host event's restart: its agent speaks again, or its silence deletes it)
            out.append((vm, f"its instance is {view[0].status} (stopped, suspended or under repair, not at Zen's asking) "
                            "and its MIG does nothing about it: no VM that runs jobs"))
        elif (state == "BUSY" and silent_before is not None and view[3] is not None  # its job ended long since: no STOP heard
              and (ended := view[3].get("job_ended_at")) is not None and ended < silent_before):
            # No job's id: a decision is every console viewer's (docs/how-to/console.md); the VM's row names it.
            out.append((vm, f"its agent still runs a job that ended at {ended:%Y-%m-%d %H:%M:%S} UTC "
                            "(no STOP of Zen's reached it): billed for nothing"))
        elif (state == "STOPPING" and silent_before is not None and vm.heard_at is not None
              and vm.heard_at < silent_before):
            out.append((vm, "silent"))
    return out


def leftover_reasons(pull_limits: str, silence_s: float) -> dict[str, str]:
    """What a pass says of deleting a VM ``leftovers`` found, by its kind (another kind is its own reason):
    ``pull_limits``, the cluster's pull limits as ``ClusterConfig.pull_limits_text`` says them. A RETIRED agent
    says no why: a pull limit, or a fault of its VM's own (docker, its GPUs, its disk, a container left running:
    ``DailyPulls.retire``), so the reason names both, never one as a fact."""
    limits = "set on the VM" if pull_limits == "no limit" else pull_limits
    return {"retired": f"its agent retired it (it takes no more jobs): its pull limit ({limits}) reached, or a fault "
                       "of the VM's own (docker, its GPUs, its disk, a container left running; its agent's log says which)",
            "drained": "drained for a scale-down but still in its MIG (the delete failed): deleted again",
            "silent": f"its agent said it was shutting down, then nothing for {silence_s:g}s, and it still runs"}


class VmViews:
    """The manager's views of a cluster's VMs, kept between passes so that only what changed is
    classified again (the simulator's adapters hand over the same objects for what did not)."""

    def __init__(self) -> None:
        self._parts: dict[str, Part] = {}  # region -> its part
        # region -> (its instances as last read, their names, the names of those GCE bills)
        self._names: dict[str, tuple[list[MigInstance], list[str], list[str]]] = {}
        self._last: Pass = ((), (), None, None, None, (), {}, frozenset())
        self._leaving: tuple[tuple[Vm, ...], tuple[Vm, ...]] = ((), ())  # VMs, and ``leaving`` of them

    def names_of(self, region: str, instances: list[MigInstance]) -> tuple[list[str], list[str]]:
        """The names of ``instances``, and of those GCE bills (``MigInstance.billed``), kept while the same
        listing object is read again."""
        cached = self._names.get(region)
        if cached is None or cached[0] is not instances:
            cached = self._names[region] = (instances, [i.name for i in instances],
                                            [i.name for i in instances if i.billed])
        return cached[1], cached[2]

    def build(self, listings: dict[str, list[MigInstance]], first_seen: dict[str, datetime], facts: FleetFacts
              ) -> tuple[tuple[Vm, ...], dict[str, str | None]]:
        """The VMs as the planner sees them, and each one's zone, rebuilt only where their inputs changed:
        an adapter that returns the same objects for unchanged instances, first-seen times and agents (the
        simulator's) spares the work per VM, per region (the same listing, none of its VMs ``_changed``) or pass."""
        held, agents, drained = facts.held, facts.agents, facts.drained
        last = self._last
        if (last[2] is first_seen and last[3] is held and last[4] is agents and last[7] == drained
                and len(last[1]) == len(listings)
                and all(r == lr and i is li for (r, i), lr, li in zip(listings.items(), last[0], last[1]))):
            return last[5], last[6]
        changed = self._changed(facts)
        rebooting = {name: memory.booting_since[i] if i < len(memory.booting_since) else math.inf
                     for memory in facts.memory.values() for i, name in enumerate(memory.booting)}
        vms: list[Vm] = []
        zones: dict[str, str | None] = {}
        parts, self._parts = self._parts, {}
        for region, instances in listings.items():
            part = parts.get(region)
            if part is None or part[0] is not instances or changed is None or not changed.isdisjoint(part[3]):
                part = self._region(region, instances, part, first_seen, held, agents, drained, rebooting)
            self._parts[region] = part
            vms += part[1].vms
            zones.update(part[2])
        self._last = (tuple(listings), tuple(listings.values()), first_seen, held, agents, tuple(vms), zones, drained)
        remember_index(self._last[5], {region: part[1] for region, part in self._parts.items() if part[1].vms})
        return self._last[5], zones

    def _region(self, region: str, instances: list[MigInstance], last: Part | None, first_seen: dict[str, datetime],
                held: Mapping[str, str], agents: Mapping[str, Agent], drained: frozenset[str],
                rebooting: Mapping[str, float] = {}) -> Part:
        """One region's part: (its instances, their Vms (``RegionVms``), zones, names, and per name its
        view); a VM's view is kept from ``last`` while its instance, first-seen time, job, agent, drain and
        ``rebooting`` entry are (another process's pass may have seen it recreated since this one looked).
        ``rebooting``: the VMs the last plan saw booting, since when (``RegionMemory.booting``)."""
        views: dict[str, View] = last[4] if last is not None else {}
        kept: dict[str, View] = {}
        zones: dict[str, str | None] = {}
        for instance in instances:
            name = instance.name
            zones[name] = instance.zone
            since, job, agent, gone = first_seen[name], held.get(name), agents.get(name), name in drained
            rebooted, view = rebooting.get(name), views.get(name)
            # (each input compared by identity first: most are the very objects the last pass read)
            if (view is None or view[0] is not instance and view[0] != instance or view[1] is not since and view[1] != since
                    or view[3] is not agent and view[3] != agent or view[2] != job or view[5] != gone or view[6] != rebooted):
                view = (instance, since, job, agent, classify(instance, region, since, held, agents, gone, rebooted),
                        gone, rebooted)
            kept[name] = view
        return instances, RegionVms(view[4] for view in kept.values()), zones, kept.keys(), kept

    def _changed(self, facts: FleetFacts) -> frozenset[str] | None:
        """The VMs whose job, agent or drain may differ from what the last pass read; None: unknown, so
        every VM is checked (Postgres cannot say; the simulator's ``FleetFacts.changed`` does)."""
        last, hint = self._last, facts.changed
        if last[3] is facts.held and last[4] is facts.agents:
            changed: frozenset[str] = frozenset()
        elif hint is not None and hint[0] is last[3] and hint[1] is last[4]:
            changed = hint[2]
        else:
            return None
        return changed if last[7] == facts.drained else changed | (last[7] ^ facts.drained)

    def leaving(self, vms: tuple[Vm, ...]) -> tuple[Vm, ...]:
        """Of ``vms``, the DELETING and BUSY ones that hold no job, in the policy's grouping (``vm_index``):
        what ``leftovers`` looks at. Kept with the tuple, which ``build`` hands over again while nothing changed."""
        if self._leaving[0] is not vms:
            self._leaving = (vms, tuple(vm for (_, phase), group in vm_index(vms).phases.items()
                                        if phase is VmPhase.DELETING or phase is VmPhase.BUSY
                                        for vm in group if vm.job_id is None))
        return self._leaving[1]

    def view(self, vm: Vm) -> View | None:
        """(instance, first seen, job, agent, Vm, drained, rebooting since) as the last pass read ``vm``."""
        part = self._parts.get(vm.region)
        return None if part is None else part[4].get(vm.name)
