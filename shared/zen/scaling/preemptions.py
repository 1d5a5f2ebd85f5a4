"""What preemptions cost in each pool, learned by the planner from the VMs it sees (pure, no I/O).

A busy VM leaves BUSY either because its job ended (IDLE, or retired by Zen: ``Vm.retiring``) or because
it went away under the job (its MIG recreates it, or it is gone or going): Zen never deletes a busy VM,
so the second is a preemption (or a VM that failed, or a flex-start VM at the end of its run duration,
which cost the same). Each pool's memory keeps, decayed with ``Timing.trust_s``,
the busy seconds its VMs ran, the seconds of runs cut short and how many were; and the average job
run. A run is one job on one VM (a VM that took another job between two passes finished the last).
From those, :func:`cost_factor` is what one useful VM-hour there costs in VM-hours: the runs thrown
away (a job without checkpoints loses its run so far; one with checkpoints about half an interval) and
the rerun's billed boot, against every busy second the pool's VMs were seen to survive, including the
runs still going, and a prior of one VM busy for ``Timing.trust_s`` without a loss. The planner
multiplies a pool's price by it (``zen.scaling.ranking``). Why the runs still going and the prior:
docs/explanations/scaling.md, "Preemptions learned per pool".
"""

from __future__ import annotations

import math
from datetime import datetime

from zen.scaling.model import RegionMemory, Timing, Vm, VmPhase

_RUN_WEIGHT = 0.2  # weight of a finished run in the moving average of run times


def learn(memory: RegionMemory, vms: tuple[Vm, ...], now: datetime, timing: Timing,
          busy: tuple[tuple[str, ...], tuple[str | None, ...]] | None = None) -> RegionMemory:
    """The pool's memory after this pass: runs that ended since the last one folded in, the busy VMs
    now remembered with their jobs. Unchanged (the same object) while no VM started or left a job.
    ``busy``: the names of the BUSY ones of ``vms`` and their jobs when already known (the planner's index has them).

    A run is one job on one VM: a VM busy at both passes with another job than before finished its
    last one in between (an agent claims its next job as soon as one ends, often between two passes),
    so only the job it holds when it is taken back counts as lost. Keyed by the VM alone, its jobs
    since it was first seen busy were one run, all lost at its preemption: a pool whose VMs had run
    jobs back to back for an hour read as every second of that hour thrown away."""
    if busy is None:
        busy = (tuple(vm.name for vm in vms if vm.phase is VmPhase.BUSY),
                tuple(vm.job_id for vm in vms if vm.phase is VmPhase.BUSY))
    names, jobs = busy
    if names == memory.busy and jobs == memory.busy_jobs:
        return memory
    before = memory.busy_jobs if len(memory.busy_jobs) == len(memory.busy) else (None,) * len(memory.busy)
    now_s = now.timestamp()
    holds = dict(zip(names, jobs))
    going: dict[str, float] = {}  # the remembered runs still going: VM -> since
    now_vms: dict[str, Vm] | None = None
    spell_s, lost_s, preempted, run_s = 0.0, 0.0, 0.0, memory.run_s
    for name, started, job in zip(memory.busy, memory.busy_since, before):
        if name in holds and (job is None or holds[name] == job):  # (None: a job not known then, its claim's)
            going[name] = started
            continue
        ran = max(0.0, now_s - started)
        spell_s += ran
        if now_vms is None:
            now_vms = {vm.name: vm for vm in vms}
        vm = now_vms.get(name)
        if name in holds or vm is not None and (vm.phase is VmPhase.IDLE or vm.retiring):  # its job ended
            run_s = ran if run_s is None else (1 - _RUN_WEIGHT) * run_s + _RUN_WEIGHT * ran  # (then another, or retired)
        else:  # recreated (booting), going or gone under its job: taken back
            lost_s, preempted = lost_s + ran, preempted + 1
    decay = math.exp(-max(0.0, now_s - (memory.runs_seen_s or now_s)) / timing.trust_s)
    return memory.replaced(  # a run is timed from the first pass that sees it (within a tick of its start)
        busy=names, busy_since=tuple(going.get(name, now_s) for name in names), busy_jobs=jobs, runs_seen_s=now_s,
        run_s=run_s, busy_s=memory.busy_s * decay + spell_s, lost_s=memory.lost_s * decay + lost_s,
        preempted=memory.preempted * decay + preempted)


def cost_factor(memory: RegionMemory, checkpoint_every_s: float | None, boot_s: float, now_s: float,
                prior_s: float) -> float:
    """VM-hours paid per useful VM-hour in the pool, as its preemptions go: 1 where none were seen.
    Without checkpoints (``checkpoint_every_s`` None) a preemption throws the run so far away (as
    learned); with them, half the job's own checkpoint interval (at most the run); each also pays the
    rerun's boot. The busy time is the finished runs' (decayed), the running VMs' so far at ``now_s`` and
    ``prior_s`` of a VM that lost nothing. The sums decay over ``prior_s`` (``Timing.trust_s``) from when they
    were last folded in (``RegionMemory.runs_seen_s``) to ``now_s``: :func:`learn` folds them in only when the
    pool's busy VMs change, and a pool its losses priced out keeps none busy, its factor fading all the same."""
    if memory.preempted <= 0:
        return 1.0
    decay = math.exp(-max(0.0, now_s - (memory.runs_seen_s or now_s)) / prior_s) if prior_s > 0 else 1.0
    preempted, lost_s = memory.preempted * decay, memory.lost_s * decay
    if checkpoint_every_s is not None:
        lost = preempted * min(checkpoint_every_s / 2, memory.lost_s / memory.preempted)
    else:
        lost = lost_s
    lost += preempted * boot_s
    busy = memory.busy_s * decay + sum(max(0.0, now_s - since) for since in memory.busy_since) + prior_s
    if busy <= 0:
        return 1.0
    useful = max(busy - lost, 0.05 * busy)  # at most 20x: a pool that only loses stays ranked
    return busy / useful
