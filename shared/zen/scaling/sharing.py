"""Room on busy VMs as supply, for a cluster whose VMs run several jobs at once (``max_jobs_per_vm``
> 1, issue 15): before the planner runs, the queued jobs that fit the room of busy VMs in their allowed
regions are taken out of the demand, so no VM is booted for a job an 8-GPU VM running one 4-GPU job
can still take. How (greedy, an estimate) and what it costs: docs/explanations/scaling.md.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from zen.core.provisioning import only_model
from zen.scaling.model import DemandGroup, Vm, VmPhase, fold_demand


def absorb(queued: Iterable[Mapping[str, Any]], loads: Mapping[str, tuple[int, int]], vms: Iterable[Vm],
           vm_gpus: int, max_jobs: int, ends: Callable[[Vm, float | None], bool] | None = None,
           agents: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[DemandGroup, ...]:
    """The demand left once VMs with room (busy ones, and idle ones beside their first job) took the queued jobs that fit,
    in VMs: the jobs left of a row packed on new VMs, as many on one as its slots and GPUs take.

    ``queued``: rows of ``priority, regions, gpus, jobs, oldest`` and optionally ``max_wait_s``, ``checkpoints``
    and ``longest`` (queued jobs by the GPUs each holds; ``regions``: their pools); ``loads``: VM name -> (jobs,
    GPUs) it holds; ``vms``: the snapshot's VMs (BUSY and IDLE ones offer room: a VM going away takes nothing);
    ``ends(vm, longest)``: the VM's run ends before the row's longest job would (a flex-start VM's: its claim
    would be refused: ``zen.scaling.flexrun.ending``), so its room is none for that row. An idle VM is the
    planner's supply for one job already (``ZenPlanner.match``): the first job to reach it is left in the demand
    for that, and only the room beside it absorbs (an array of two on an idle VM of two slots booted a VM for
    the second, which then went idle, billed). ``agents``: VM name -> its agent's last word; a VM whose agent
    runs one job at a time (``shares`` false: its heartbeats list no ``jobs``, as a VM booted before the cluster's
    ``max_jobs_per_vm`` was raised) has no room: counted so, a queued job waited for its job's end, no VM booted.
    A row whose jobs accept one model only (``provisioning``) takes no room on a VM a scaling pass recorded as another
    (``Vm.model``: a primary MIG's spot VM after its cluster's models were narrowed to standard refuses their claims,
    ``zen.jobs.claims``), and its jobs left are a group of that model (``DemandGroup.accepts``), so the planner counts
    no such idle VM as theirs either; they pack with the key's other jobs on new VMs all the same (``_split``)."""
    room: dict[str, list[tuple[Vm, list[int]]]] = {}  # region -> (VM, [free slots, free GPUs, 1: one job left to match])
    for vm in vms:
        if agents is not None and not agents.get(vm.name, {}).get("shares", True):
            continue
        if vm.phase in (VmPhase.BUSY, VmPhase.IDLE) and (vm.phase is VmPhase.IDLE or vm.name in loads):
            jobs, gpus = loads.get(vm.name, (0, 0))
            if jobs < max_jobs and gpus < vm_gpus:
                room.setdefault(vm.region, []).append(
                    (vm, [max_jobs - jobs, vm_gpus - gpus, int(vm.phase is VmPhase.IDLE)]))
    left: dict[tuple[Any, ...], list[Any]] = {}  # demand key -> [jobs matched to idle VMs, [(GPUs each, jobs)], oldest, longest]
    for row in sorted(queued, key=lambda r: (-r["priority"], r["oldest"])):
        count, need, matched = row["jobs"], row["gpus"] or vm_gpus, 0
        longest = None if row.get("longest") is None else float(row["longest"])
        accepts = only_model(row.get("provisioning"))
        for region in row["regions"]:
            for vm, free in room.get(region, ()):
                if count <= 0 or ends is not None and ends(vm, longest) or (
                        accepts is not None and vm.model is not None and vm.model != accepts):
                    continue
                if free[2]:  # an idle VM: one of this row's jobs is the one the planner matches it to (kept)
                    free[:] = [free[0] - 1, free[1] - need, 0]
                    count, matched = count - 1, matched + 1
                take = min(count, free[0], max(free[1], 0) // need)
                if take > 0:
                    free[0] -= take
                    free[1] -= take * need
                    count -= take
        if count + matched:  # (the jobs past their start bound apart: the planner ranks a group by its oldest)
            key = (row["priority"], tuple(row["regions"]), row.get("max_wait_s"), row.get("checkpoint_every_s"), 1, 0,
                   bool(row.get("late")))
            for got in (left.setdefault(key, [0, [], row["oldest"], longest, {}]),
                        left[key][4].setdefault(accepts, [0, [], row["oldest"], longest])):  # the key's, the model's
                got[0] += matched
                got[1].append((need, count))
                got[2] = min(got[2], row["oldest"])
                got[3] = longest if got[3] is None else got[3] if longest is None else max(got[3], longest)
    def new_vms(key: tuple[Any, ...]) -> int:
        """The new VMs a key's jobs need: those past their bound packed alone; those within it, what packing them beside
        the late ones adds (apart, one late and one new 2-GPU job were asked two 4-GPU VMs where one holds both)."""
        late = key[:6] + (True,)
        if key[6] or late not in left:
            return packed(left[key][1], vm_gpus, max_jobs)
        return packed(left[late][1] + left[key][1], vm_gpus, max_jobs) - packed(left[late][1], vm_gpus, max_jobs)

    return sum((fold_demand((key[:6] + (accepts,), vms, oldest, longest)
                            for key, got in left.items() if key[6] is late
                            for accepts, vms, oldest, longest in _split(got[4], new_vms(key), vm_gpus, max_jobs))
                for late in (True, False)), ())


def _split(by_model: dict[str | None, list[Any]], new: int, vm_gpus: int, max_jobs: int
           ) -> list[tuple[str | None, int, Any, float | None]]:
    """A demand key's VMs (those its jobs matched to idle VMs, and ``new``, its jobs left packed together) by the model
    its jobs accept, ``(accepts, VMs, oldest, longest)``: jobs of one model only (the pools of one key come to the same
    models: at most one besides any) have the new VMs they alone pack on, the rest go to the last (a new VM
    is of its pool's model, which both take: apart, a 2-GPU job of each was asked two VMs one holds)."""
    parts, models = [], sorted(by_model, key=lambda a: a is None)  # the one model first, any last
    for n, accepts in enumerate(models, start=1):
        matched, needs, oldest, longest = by_model[accepts]
        vms = new if n == len(models) else min(new, packed(needs, vm_gpus, max_jobs))  # the last: the rest
        new -= vms
        parts.append((accepts, matched + vms, oldest, longest))
    return parts


def packed(needs: list[tuple[int, int]], vm_gpus: int, max_jobs: int) -> int:
    """The new VMs that hold ``needs`` ((GPUs each, jobs) of one demand key: its rows of several GPU counts or models
    come to the same pools), first fit, the largest first: a VM each, 4 VMs were booted for four 2-GPU jobs two
    4-GPU VMs of two slots hold, and rows packed apart booted one for a 1-GPU job and one for a 3-GPU job."""
    vms: list[list[int]] = []  # [free slots, free GPUs, how many new VMs are left so]
    for need, count in sorted(needs, reverse=True):
        for vm in vms:
            each = min(vm[0], vm[1] // need)  # jobs of this row one of these VMs still takes
            if each > 0 and count > 0:
                filled, rest = divmod(min(count, each * vm[2]), each)
                count -= filled * each + rest
                if filled:
                    vms.append([vm[0] - each, vm[1] - each * need, filled])
                if rest:
                    vms.append([vm[0] - rest, vm[1] - rest * need, 1])
                vm[2] -= filled + (1 if rest else 0)
        per_vm = max(1, min(max_jobs, vm_gpus // need))
        whole, rest = divmod(count, per_vm)
        if whole:
            vms.append([max_jobs - per_vm, vm_gpus - per_vm * need, whole])
        if rest:
            vms.append([max_jobs - rest, vm_gpus - rest * need, 1])
    return sum(vm[2] for vm in vms)
