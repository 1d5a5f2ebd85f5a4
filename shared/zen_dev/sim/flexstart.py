"""Flex-start in the simulated world: a flex-start pool's MIG grows by resize requests (Dynamic Workload
Scheduler), each queued for a delay drawn from the scenario's ``flex_start.grant`` and then granted all at
once, in one zone, as soon as one of the MIG's zones holds every VM of it (each request on its own);
never a stockout error, never preempted.

A request's VMs wait without capacity (CREATING, no error: the planner sees them booting, not started);
deleting one cancels the whole request, as production's ``FlexStartMig`` does.
How it compares with production's resize requests: docs/reference/simulator.md#what-the-simulator-models
"""

from __future__ import annotations

import random

from zen_dev.sim.jobs import sample
from zen_dev.sim.state import SimMig, SimVm


class FlexGrants:
    """The flex-start requests of one simulated world (``zen_dev.sim.world.Simulation``), which calls
    :meth:`request` for each request of a flex-start MIG's resize (one per gang asked for, one per VM of the
    rest: ``SimMigPort.resize``) and :meth:`capacity_freed` when a zone frees room."""

    def __init__(self, world, seed: int):
        self._world = world
        self._rng = random.Random(f"flex-{seed}")
        self._ready: dict[str, list[list[SimVm]]] = {}  # MIG name -> requests past their delay, oldest first
        self._request_of: dict[str, list[SimVm]] = {}  # a waiting VM's name -> its request's VMs

    def request(self, mig: SimMig, count: int) -> None:
        """One resize request of ``count`` VMs: queued, then granted whole (:meth:`_due`)."""
        world = self._world
        batch = []
        for _ in range(count):
            vm = SimVm(f"{mig.name}-{next(world.names):06d}", mig, world.now)
            mig.vms[vm.name] = mig.cluster.vms[vm.name] = vm
            batch.append(vm)
            self._request_of[vm.name] = batch
        delay = sample(world.scenario.spec.flex_start.grant, self._rng)
        world._push(world.now + delay, world.GRANT, self._due, mig, batch)

    def _due(self, mig: SimMig, batch: list[SimVm]) -> None:
        self._ready.setdefault(mig.name, []).append(batch)
        self._grant(mig)

    def cancelled(self, vm: SimVm) -> list[SimVm]:
        """``vm``, waiting, was deleted: its whole request is cancelled (as Zen's ``FlexStartMig`` cancels
        a request when one of its pending VMs goes); the others of it, still waiting, to delete too."""
        batch = self._request_of.pop(vm.name, [])
        for other in batch:
            self._request_of.pop(other.name, None)
        return [other for other in batch if other is not vm and other.created_s is None
                and other.mig.vms.get(other.name) is other]

    def capacity_freed(self, mig: SimMig) -> None:
        if self._ready.get(mig.name):
            self._grant(mig)

    def _grant(self, mig: SimMig) -> None:
        """Grant each of the MIG's due requests that one zone can hold whole, all its VMs in that zone (a
        flex-start MIG's target shape is ANY_SINGLE_ZONE, as the Compute stand-in grants); one that does not
        fit waits for room, without holding back the others (each request is granted on its own)."""
        world, ready = self._world, self._ready.get(mig.name, [])
        waiting: list[list[SimVm]] = []
        for batch in ready:
            alive = [vm for vm in batch if mig.vms.get(vm.name) is vm and vm.created_s is None]
            if not alive:
                continue
            zone = self._zone_for(mig, len(alive))
            if zone is None:
                waiting.append(batch)
                continue
            for vm in alive:
                self._request_of.pop(vm.name, None)
                world._place(mig, vm, zone)
        self._ready[mig.name] = waiting
        if waiting:
            world._watch_for_room(mig)

    def _zone_for(self, mig: SimMig, count: int) -> str | None:
        """The MIG's zone with room for ``count`` more VMs now (the most free first), if any."""
        world = self._world
        if world.unlimited:
            return world._free_zone(mig)
        free = {zone: world._capacity_now(mig.capacity_key(zone)) - world.used.get(mig.capacity_key(zone), 0)
                for zone in mig.zones}
        zone = max(mig.zones, key=lambda z: free[z])
        return zone if free[zone] >= count else None
