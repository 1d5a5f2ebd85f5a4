"""Regions whose MIG a pass could not read (a 429, a 5xx, a MIG not found): what the planner is shown.

Nothing is added in such a region (its target size is unknown), but it costs the rest of the
cluster no more than it did: it counts toward ``max_vms`` as its last known size (the instances the
planner's memory last recorded there, or the size the last pass's adds left it at, or what this manager last
read, the most of them), never as full. The planner
is shown the region blocked, so no job, hedge or ``min_vms`` VM is asked there (the block is not
kept: ``ClusterManager`` records no memory of an unread region), and demand without it: a job that
allows other regions spills to them, and one that allows only unread regions waits with that reason
(a HOLD decision), not with a limit it has not reached.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from zen.scaling import gangs
from zen.scaling.model import Action, ClusterSnapshot, Decision, DemandGroup, RegionMemory
from zen.scaling.port import MigApiError, MigPort

_FRESH = RegionMemory()


def target_or_error(mig: MigPort) -> int | MigApiError:
    """``mig``'s target size read now, or why it could not be (a MIG not read is never added to blindly)."""
    try:
        return mig.target_size()
    except MigApiError as exc:
        return exc


def last_known_size(region: str, memory: dict[str, RegionMemory], last_read: dict[str, int]) -> int:
    """What region's MIG is taken to hold while it cannot be read: the more of the VMs last recorded there and
    the size the last pass left it at (its own adds, which no listing showed yet); with no memory, what this
    manager last read (another instance's passes may have shrunk it since: the shared memory says, not this)."""
    remembered = memory.get(region)
    if remembered is None:
        return last_read.get(region, 0)
    return max(len(remembered.known), remembered.sized)


def planner_view(snapshot: ClusterSnapshot) -> tuple[ClusterSnapshot, list[Decision]]:
    """The snapshot to plan from, and the HOLD decisions of the jobs left with no region read."""
    unread = snapshot.unread
    if not unread:
        return snapshot, []
    until = snapshot.now + timedelta(seconds=1)
    memory = dict(snapshot.memory)
    for region in unread:
        remembered = memory.get(region, _FRESH)
        if remembered.blocked_until is None or remembered.blocked_until < until:
            memory[region] = remembered.replaced(blocked_until=until, quota_block="")  # no quota read lifts it
    demand: list[DemandGroup] = []
    waiting: dict[tuple[str, ...], int] = {}
    for group in snapshot.demand_groups():
        regions = tuple(r for r in group.regions if r not in unread)
        if regions:
            demand.append(group if regions == group.regions else replace(group, regions=regions))
        else:
            waiting[group.regions] = waiting.get(group.regions, 0) + group.count
    held = [Decision(Action.HOLD, None, f"{gangs.waiting(count, snapshot.cluster.shared)}: the MIG of every allowed region could not be read "
                                        f"({', '.join(regions)}); nothing is added there until a pass reads it", count)
            for regions, count in waiting.items()]
    return replace(snapshot, memory=memory, demand=tuple(demand)), held
