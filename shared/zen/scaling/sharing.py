"""Room on busy VMs as supply, for a cluster whose VMs run several jobs at once (``max_jobs_per_vm``
> 1, issue 15): an 8-GPU VM running one 4-GPU job still takes a queued 4-GPU job, so no VM should be
booted for it.

The planner counts idle VMs as supply for queued jobs; a VM that holds a job is BUSY and never idle
(so never deleted, and never kept or dropped by the ski rental). Its room is accounted here instead,
before the planner runs: the queued jobs that fit the room of busy VMs in their allowed regions
are taken out of the demand, and the planner sees only the rest. Greedy, highest priority and
oldest first, each job's regions in the cluster's preference order: the VMs' agents pull start
messages themselves, so this only estimates which jobs the room will absorb, as idle VMs are an
estimate. Cost: two queries per pass (``FleetDb.shared_load``), O(demand groups x VMs) work, and
nothing at all for a cluster with ``max_jobs_per_vm: 1`` (the simulator's).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from zen.scaling.model import DemandGroup, Vm, VmPhase


def absorb(queued: Iterable[Mapping[str, Any]], loads: Mapping[str, tuple[int, int]], vms: Iterable[Vm],
           vm_gpus: int, max_jobs: int) -> tuple[DemandGroup, ...]:
    """The demand left once busy VMs with room took the queued jobs that fit them.

    ``queued``: rows of ``priority, regions, gpus, jobs, oldest`` (queued jobs by the GPUs each
    holds); ``loads``: VM name -> (jobs, GPUs) it holds; ``vms``: the snapshot's VMs (only BUSY ones
    offer room: a VM going away takes nothing)."""
    room: dict[str, list[list[int]]] = {}  # region -> [free slots, free GPUs] per busy VM
    for vm in vms:
        if vm.phase is VmPhase.BUSY and vm.name in loads:
            jobs, gpus = loads[vm.name]
            if jobs < max_jobs and gpus < vm_gpus:
                room.setdefault(vm.region, []).append([max_jobs - jobs, vm_gpus - gpus])
    left: dict[tuple[int, tuple[str, ...]], list[Any]] = {}  # [count, oldest]
    for row in sorted(queued, key=lambda r: (-r["priority"], r["oldest"])):
        count, need = row["jobs"], row["gpus"] or vm_gpus
        for region in row["regions"]:
            for free in room.get(region, ()):
                take = min(count, free[0], free[1] // need)
                if take > 0:
                    free[0] -= take
                    free[1] -= take * need
                    count -= take
        if count:
            key = (row["priority"], tuple(row["regions"]))
            group = left.setdefault(key, [0, row["oldest"]])
            group[0] += count
            group[1] = min(group[1], row["oldest"])
    return tuple(DemandGroup(regions, count, oldest, priority) for (priority, regions), (count, oldest) in left.items())
