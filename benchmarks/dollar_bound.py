"""``make bench-bound``'s dollar bound: the least any policy could pay per useful GPU-hour, against the
price floor, while meeting issue 33's speed targets (p95 start <= 1.10x and p50 <= 1.00x
``ask-every-region-standard``'s), by a linear-programming relaxation over the simulator's own scenario,
jobs and capacity. If it exceeds 1.30x the floor on a scenario, the dollar target cannot hold there
together with the speed targets, whatever the policy.

The relaxation, each simplification in the policy's favour (the LP optimum is at most what any policy
pays in the simulator):

- The jobs (arrival, duration, cluster, allowed regions) are ``zen_dev.sim.jobs.load_jobs``'s and the
  capacity is the scenario's schedule, as the simulator loads them; the bench's seeds share both (they
  draw only boots, preemptions and victims again), so the seeds pooled are identical copies of one LP
  and one copy's optimum is theirs (average any pooled solution over the copies).
- Boots take 0 s, passes no time; fractional assignment is allowed.
- Time in slots of ``slot_s`` (60 s, or the least multiple of it that leaves W95 at most 64 slots
  long: burst-200's and one held-out draw's; longer slots only loosen the bound). A start at ``s``
  counts in slot ``ceil(s / slot_s)``: the start window ``[arrival, arrival + W]`` becomes the slots
  ``ceil(arrival / slot_s) .. ceil((arrival + W) / slot_s)`` (rounded up). A run of ``d`` seconds then
  covers at least the ``floor(d / slot_s) - 1`` whole slots from its start slot on; only those count
  as occupied (fewer than it really holds).
- Only each job's final, useful run is paid, at its model's and region's price per VM-hour (the
  simulator's) for the time it counts: boots, idle VMs, deletions and runs a preemption threw away
  (the bench's main table has no checkpoints) only add cost. A run counts until the horizon at most,
  as in the simulator, anywhere between what its start slot allows: the ratio of dollars to floor
  dollars is then a linear-fractional program, solved as an LP (Charnes-Cooper: every variable
  scaled by 1 / floor dollars).
- Spot: in each region and slot, the spot runs covering the slot <= the sum over the region's zones of
  each zone's MAXIMUM capacity within the slot (a spot VM above capacity is taken back, so a useful
  run never is). Zones are pooled per region (spot's price is per region), and standard VMs, which
  hold capacity in the simulator, are not counted against it.
- Standard (and flex-start where a cluster lists it: none of the bench's clusters does, so it is left
  out there; if listed, it is treated as standard, granted at once) is unlimited, but starts in a
  region only where a zone had capacity >= 1: rule ``ever``, at some moment before the end of the start
  slot (a standard VM made then and kept idle until the job: its idle time is not paid here), or rule
  ``slot``, within the start slot or the one before (no standard VM kept waiting through a drop: the
  tighter figure, a bound only for policies that do not keep standard VMs idle for later jobs).
- A cluster's ``max_vms`` bounds its runs covering a slot (idle VMs and ``max_vms_per_region`` not counted).
- Speed: W95 = 1.10x and W50 = 1.00x ``ask-every-region-standard``'s pooled p95 and p50 start, run in
  the same process with the same seeds as ``zen_dev.sim.dollars``. A pooled percentile (linear
  interpolation, ``zen_dev.sim.metrics.percentile``) at or under W needs at least ``floor((n - 1) q) + 1``
  of the ``n`` pooled jobs within W: that share of jobs starts within W95, and of W50. A job not
  started within W95 is "late": it costs the floor price, takes no capacity, and counts anything
  from nothing (never started) to its duration.
- The bench measures a job's FIRST start, and a first run on spot that a capacity drop takes back is
  one. So a job may also meet W95 (and W50) that way: its first run holds spot capacity (and
  ``max_vms``) from W95's end at the latest until a drop in its region takes it back, each drop takes
  back at most the VMs it removes (per region and slot, the zones' drops summed), and the victims of a
  drop with the runs covering its slot ran within the region's capacity just before it (summed over the
  slot's drops). Its rerun runs
  on spot at the cheapest spot price of its regions, on standard at the cheapest standard one, or never,
  for anything up to its duration. On spot it needs room in its region: from each slot on, the spot
  runs' whole slots plus the reruns of jobs that arrived since fit in the capacity left until the
  horizon (a rerun may be anywhere after its job's arrival, not only after the drop). With random
  preemptions (``preemption.rate_per_hour``; none in the bench) the budget is unlimited. The column
  "no takeback" leaves this out: the bound for first starts that are the useful run's.
- The objective is the dollars over the floor dollars (every useful run at the cluster's cheapest listed
  price among its regions and models): ``zen_dev.sim.metrics``'s ``usd_vs_floor``, the bench's "x floor".

Two tightenings, each still a relaxation (``--tighter``: the column "tighter", both at once):
- ``late_paid``: a late job runs as a rerun does (on spot in the room its region has left from its
  arrival, on standard at the cheapest standard price, or for any share of its duration down to none),
  not at the floor price without capacity.
- ``fifo``: each queue starts its jobs' first runs in arrival order (jobs of one cluster with the same
  regions, priority, user, size and accepted model; ties in the jobs' order), as the simulator's queues do for every
  policy (a VM takes the job of highest priority published first that may run there): no policy here
  picks a later, shorter job first. Per slot of the earlier job's start window, its share started by then is
  at least the later one's (cumulative shares: a fractional mix of orders passes where no single order
  would; a first start taken back counts from its job's arrival).

Also printed for contrast: the same LP without the speed rows (every job may be late: 1.00 by
construction, a check of the units), and with speed but no capacity or ``max_vms`` rows (what the jobs'
allowed regions alone cost). Solver: SciPy's HiGHS (``linprog``), a development-only dependency.
The table (``make bench-bound``): benchmarks.dollar_report. Figures and what follows: docs/benchmarks/bound.md#dollars
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from zen_dev.capacity.traces import UNLIMITED
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.metrics import RunResult
from zen_dev.sim.scenario import Scenario
from zen_dev.sim.world import capacity_types

SLOT_S = 60.0  # benchmarks.dollar_report lengthens it where W95 spans more than 64 slots
METHOD = "highs-ipm"  # interior point: ~10x faster than dual simplex on these (burst-200: 5 s against 50 s)
TARGET = 1.30  # issue 33: dollars per useful GPU-hour <= 1.30x the floor
NON_SPOT = ("standard", "flex-start")


@dataclass(frozen=True)
class Speed:
    """Starts within ``w95_s`` for at least ``share95`` of the jobs and within ``w50_s`` for ``share50``."""

    w95_s: float
    w50_s: float
    share95: float
    share50: float


def need(n: int, q: float) -> int:
    """How many of ``n`` waits must be at or under W for their q-th percentile (interpolated) to be."""
    return math.floor((n - 1) * q / 100.0) + 1 if n else 0


def speed_of(std: RunResult, p95_limit: float = 1.10, p50_limit: float = 1.00) -> Speed:
    """The speed targets from ``ask-every-region-standard``'s (pooled) run, as ``dollars.verdicts`` judges
    them on rounded figures (0.05 s added for the rounding)."""
    summary, n = std.summary(), len(std.starts)
    return Speed(p95_limit * summary["p95_start_s"] + 0.05, p50_limit * summary["p50_start_s"] + 0.05,
                 need(n, 95) / n, need(n, 50) / n)


def slot_max(scenario: Scenario, zone: str, capacity_key: str, slots: int, slot_s: float) -> np.ndarray:
    """A zone's largest capacity within each slot (inf where unlimited)."""
    schedule = scenario.capacity
    out = np.array([schedule.capacity(zone, capacity_key, k * slot_s) for k in range(slots)], dtype=float)
    t = schedule.next_change(zone, capacity_key, 0.0)
    while t is not None and t < slots * slot_s:
        k = int(t // slot_s)
        out[k] = max(out[k], schedule.capacity(zone, capacity_key, t))
        t = schedule.next_change(zone, capacity_key, t)
    out[out >= UNLIMITED] = math.inf
    return out


@dataclass
class _Lp:
    """The LP under construction: columns with costs and upper bounds, rows (= or <=, right-hand side)
    and the constraint matrix's triples. Charnes-Cooper form: every variable is scaled by ``tau`` (1 over
    the floor dollars), so the ratio's denominator is the row ``floor dollars = 1`` and every other row
    is homogeneous (its right-hand side times ``tau``)."""

    cost: list
    upper: list
    rows: list
    cols: list
    vals: list
    upper_rows: list  # the rows that are <= (the others are =)
    rhs: dict  # row -> right-hand side where not 0
    n_rows: int = 0

    def column(self, cost: float = 0.0, upper: float = math.inf) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        return len(self.cost) - 1

    def row(self, at_most: bool = False) -> int:
        if at_most:
            self.upper_rows.append(self.n_rows)
        self.n_rows += 1
        return self.n_rows - 1

    def add(self, row: int, col: int, value: float) -> None:
        self.rows.append(row)
        self.cols.append(col)
        self.vals.append(value)


def _reruns(lp: _Lp, tau: int, regions: list[_Occupancy], slot_s: float) -> list[int]:
    """The room spot reruns have: from each slot on, the spot runs' whole slots plus the reruns' hours
    (each counted from its job's arrival on) fit in the capacity left from that slot to the horizon.
    Returns the rows a rerun's hours enter, per slot of its arrival."""
    caps = sum((o.caps for o in regions), np.zeros(len(regions[0].caps)))
    tails = np.cumsum(caps[::-1])[::-1]
    area, rerun = [lp.column() for _ in caps], [lp.column() for _ in caps]
    rows = []
    for t in range(len(caps)):
        area_row, rerun_row = lp.row(), lp.row()  # area(t) = area(t+1) + levels(t); rerun(t) likewise
        lp.add(area_row, area[t], 1.0)
        lp.add(rerun_row, rerun[t], 1.0)
        if t + 1 < len(caps):
            lp.add(area_row, area[t + 1], -1.0)
            lp.add(rerun_row, rerun[t + 1], -1.0)
        for occupancy in regions:
            lp.add(area_row, occupancy.levels[t], -1.0)
        rows.append(rerun_row)
        if math.isfinite(tails[t]):
            limit = lp.row(at_most=True)
            lp.add(limit, area[t], slot_s)
            lp.add(limit, rerun[t], 3600.0)
            lp.add(limit, tau, -slot_s * float(tails[t]))
    return rows


class _Occupancy:
    """Runs covering each slot of one resource (a region's spot capacity, a cluster's max_vms): a level
    variable per slot, at most the capacity (times tau), and one flow row per slot (level(t) = level(t-1)
    + runs starting at t - runs whose covered slots end before t)."""

    def __init__(self, lp: _Lp, caps: np.ndarray, tau: int):
        self.lp, self.caps = lp, caps
        self.flow = [lp.row() for _ in caps]
        self.levels = levels = [lp.column() for _ in caps]
        for t, (row, level, cap) in enumerate(zip(self.flow, levels, caps)):
            lp.add(row, level, 1.0)
            if t:
                lp.add(row, levels[t - 1], -1.0)
            if math.isfinite(cap):
                limit = lp.row(at_most=True)
                lp.add(limit, level, 1.0)
                lp.add(limit, tau, -float(cap))

    def run(self, col: int, start: int, covered: int) -> None:
        if covered <= 0 or start >= len(self.flow):
            return
        self.lp.add(self.flow[start], col, -1.0)
        if start + covered < len(self.flow):
            self.lp.add(self.flow[start + covered], col, 1.0)


def region_caps(scenario: Scenario, cluster, model: str, slots: int, slot_s: float) -> dict[str, np.ndarray]:
    kinds = capacity_types(scenario, cluster).get(model, {})
    return {region: sum((slot_max(scenario, zone, kinds.get(zone, cluster.machine_type), slots, slot_s)
                         for zone in zones), np.zeros(slots))
            for region, zones in cluster.zones.items()}


def spot_identity(cluster) -> str:
    """What a region's spot capacity is shared by: clusters of one machine type (each zone's capacity key,
    ``zen_dev.sim.setup.capacity_types``, depends on the zone and the machine type alone)."""
    return f"{cluster.machine_type}@spot"


def allowed_starts(caps: np.ndarray, rule: str) -> np.ndarray:
    """Per start slot: may a standard VM start there (see the module docstring's rules)?"""
    some = caps >= 1
    if rule == "ever":
        return np.maximum.accumulate(some)
    before = np.concatenate(([False], some[:-1]))
    return some | before


def _useful(lp: _Lp, col: int, price: float, floor_row: int, floor: float, low_h: float, high_h: float) -> None:
    """The VM-hours a column's run counts (its share of them): exactly ``high_h`` when it cannot reach
    the horizon, else anywhere between (the start's place in its slot, the job cut at the horizon)."""
    if low_h == high_h:
        lp.cost[col] = price * high_h
        lp.add(floor_row, col, floor * high_h)
        return
    hours = lp.column(price)
    lp.add(floor_row, hours, floor)
    for sign, bound in ((1.0, high_h), (-1.0, low_h)):  # hours <= high x; low x <= hours
        row = lp.row(at_most=True)
        lp.add(row, hours, sign)
        lp.add(row, col, -sign * bound)


def solve(scenario: Scenario, jobs: list[SimJob], speed: Speed | None, horizon_s: float, *,
          slot_s: float = SLOT_S, rule: str = "ever", capacity: bool = True, taken_back: bool = True,
          rerun_room: bool = True, late_paid: bool = False, fifo: bool = False) -> tuple[float, float]:
    """(the least dollars over the floor dollars, the share of jobs late) for the jobs submitted by the
    horizon. ``speed`` None: no speed rows (every job may be late); ``capacity`` False: no spot capacity
    or max_vms rows (standard still starts only where the rule allows); ``taken_back`` False: a job's
    first start is its useful run's (no first run on spot that a drop takes back); ``rerun_room`` False:
    the reruns of jobs taken back need no spot room; ``late_paid``: a late job runs as a rerun does (on
    spot in the room left, on standard, or for nothing up to its duration), not at the floor price
    without capacity; ``fifo``: a queue's jobs (one cluster, regions, priority, user, size) start in arrival
    order, as the simulator's queues start them for every policy: no later, shorter job first."""
    jobs = [j for j in jobs if j.submit_s <= horizon_s]
    slots = math.ceil(horizon_s / slot_s) + 1
    clusters = {c.limits.name: c for c in scenario.clusters}
    lp = _Lp([], [], [], [], [], [], {})
    tau = lp.column()
    floor_row = lp.row()
    lp.rhs[floor_row] = 1.0
    spot: dict[tuple[str, str], _Occupancy] = {}  # (region, capacity key) -> its spot runs
    allowed: dict[str, dict[str, dict[str, np.ndarray]]] = {}  # cluster -> non-spot model -> region -> slots
    vms: dict[str, _Occupancy] = {}
    for name, cluster in clusters.items():
        allowed[name] = {m: {r: allowed_starts(c, rule) for r, c in region_caps(scenario, cluster, m, slots, slot_s).items()}
                         for m in cluster.models if m in NON_SPOT}
        if capacity and "spot" in cluster.models:
            key = spot_identity(cluster)
            for region, caps in region_caps(scenario, cluster, "spot", slots, slot_s).items():
                if (region, key) not in spot:
                    spot[(region, key)] = _Occupancy(lp, caps, tau)
        if capacity and cluster.limits.max_vms:
            vms[name] = _Occupancy(lp, np.full(slots, float(cluster.limits.max_vms)), tau)
    drops = _drops(scenario, slots, slot_s) if taken_back and speed is not None else {}
    budget: dict[tuple[str, str, int], list[int]] = {}  # (region, capacity key, slot) -> its takebacks' rows
    random_takebacks = scenario.spec.preemption.rate_per_hour > 0
    rooms_needed = (drops and rerun_room) or late_paid
    reruns = {key: _reruns(lp, tau, [o], slot_s) for key, o in spot.items()} if rooms_needed else {}
    within50: list[int] = []
    late: list[int] = []
    in_time: list[tuple[int, int, dict[int, list[int]]]] = []  # per job: (first, last, start slot -> columns)
    for job in jobs:
        cluster = clusters[job.cluster]
        floor, d = cluster.floor_usd_per_vm_hour, job.duration_s
        assign = lp.row()  # its shares sum to tau
        lp.add(assign, tau, -1.0)
        first = math.ceil(job.submit_s / slot_s)
        last = math.ceil((job.submit_s + speed.w95_s) / slot_s) if speed else first - 1
        last50 = math.ceil((job.submit_s + speed.w50_s) / slot_s) if speed else first - 1
        covered = math.floor(d / slot_s) - 1
        table = cluster.table or {}
        spot_key = spot_identity(cluster)
        # A run at the floor price may count anything up to this; the most is optimal (every price is at
        # least the floor, so the ratio is >= 1 and more hours at 1.00 only lower it): fixed at the most.
        at_floor = min(d, horizon_s - job.submit_s) / 3600.0
        in_time.append((first, last, starts := {}))
        for k in range(first, last + 1):
            options = []  # (price, spot region or None)
            if "spot" in cluster.models:
                options += [(table[r]["spot"], r) for r in job.regions]
            cheapest_other = min((table[r][m] for m, by_region in allowed[job.cluster].items()
                                  for r in job.regions if by_region[r][min(k, slots - 1)]), default=None)
            if cheapest_other is not None:
                options.append((cheapest_other, None))
            # Started in ((k-1) slot, k slot], not before its arrival: it counts until the horizon at most.
            low = min(d, max(0.0, horizon_s - k * slot_s)) / 3600.0
            high = min(d, max(0.0, horizon_s - max(job.submit_s, (k - 1) * slot_s))) / 3600.0
            for price, region in options:
                col = lp.column()
                lp.add(assign, col, 1.0)
                starts.setdefault(k, []).append(col)
                _useful(lp, col, price, floor_row, floor, low, high)
                if k <= last50:
                    within50.append(col)
                if region is not None and (region, spot_key) in spot:
                    spot[(region, spot_key)].run(col, k, covered)
                if job.cluster in vms:
                    vms[job.cluster].run(col, k, covered)
        taken: list[int] = []
        if drops and "spot" in cluster.models:  # first started on spot in time, then taken back by a drop
            for region in job.regions:
                units, moments, room = drops.get((region, spot_key), (None, None, None))
                ends = [int(t) for t in np.flatnonzero(units)] if units is not None else []
                for t in ([slots - 1] if random_takebacks else ends):
                    if t < math.floor(job.submit_s / slot_s):
                        continue
                    col = lp.column()
                    lp.add(assign, col, 1.0)
                    within50.append(col)  # it may have started on arrival
                    taken.append(col)
                    if not random_takebacks:
                        if (region, spot_key, t) not in budget:
                            budget[(region, spot_key, t)] = rows = [lp.row(at_most=True)]
                            lp.add(rows[0], tau, -float(units[t]))
                            if (region, spot_key) in spot and math.isfinite(room[t]):
                                # At a drop, its victims and the runs covering the slot were all running
                                # within the region's capacity just before: summed over the slot's drops.
                                rows.append(lp.row(at_most=True))
                                lp.add(rows[1], spot[(region, spot_key)].levels[t], float(moments[t]))
                                lp.add(rows[1], tau, -float(room[t]))
                        for row in budget[(region, spot_key, t)]:
                            lp.add(row, col, 1.0)
                    for occupancy in (spot.get((region, spot_key)), vms.get(job.cluster)):
                        if occupancy is not None:  # it ran from W95's end (at the latest) to the drop
                            occupancy.run(col, last, t - last)
        arrival = math.floor(job.submit_s / slot_s)
        if taken:  # its rerun; as a start, as early as it can be (FIFO rows: the least they ask of later jobs)
            starts.setdefault(-1, []).extend(taken)
            _run_later(lp, taken, at_floor, job, cluster, spot_key, floor_row, reruns, arrival)
        col = lp.column()  # late: started after W95 (cut at the horizon) or never
        lp.add(assign, col, 1.0)
        if late_paid:
            _run_later(lp, [col], at_floor, job, cluster, spot_key, floor_row, reruns, arrival)
        else:  # at the floor price, without capacity
            _useful(lp, col, floor, floor_row, floor, at_floor, at_floor)
        late.append(col)
    if fifo:
        _fifo(lp, jobs, in_time)
    n = len(jobs)
    if speed is not None:  # late <= (1 - share95) n tau; within W50 >= share50 n tau
        for cols, sign, share in ((late, 1.0, 1.0 - speed.share95), (within50, -1.0, speed.share50)):
            row = lp.row(at_most=True)
            for col in cols:
                lp.add(row, col, sign)
            lp.add(row, tau, -sign * share * n)
    return _finish(lp, tau, late)


def _run_later(lp: _Lp, shares: list[int], at_floor: float, job: SimJob, cluster, spot_key: str,
               floor_row: int, rooms: dict[tuple[str, str], list[int]], arrival: int) -> None:
    """A run after the job's start window (``shares``' columns: its share of jobs there): on spot in a
    region's room left (``rooms``: per region, the rows of ``_reruns`` per arrival slot; without them at
    the cheapest spot price), on standard at the cheapest standard price, or never, for up to ``at_floor``
    hours."""
    table, floor = cluster.table or {}, cluster.floor_usd_per_vm_hour
    share = lp.row(at_most=True)
    for col in shares:
        lp.add(share, col, -at_floor)
    on_spot = []
    if "spot" in cluster.models:
        for region in (job.regions if rooms else [min(job.regions, key=lambda r: table[r]["spot"])]):
            on_spot.append(lp.column(table[region]["spot"]))
            if (region, spot_key) in rooms:
                lp.add(rooms[(region, spot_key)][arrival], on_spot[-1], -1.0)
    others = [table[r][m] for r in job.regions for m in cluster.models if m in NON_SPOT]
    for col in on_spot + ([lp.column(min(others))] if others else []):
        lp.add(share, col, 1.0)
        lp.add(floor_row, col, floor)


def _fifo(lp: _Lp, jobs: list[SimJob], in_time: list[tuple[int, int, dict[int, list[int]]]]) -> None:
    """Each job of a queue (one cluster, regions, priority, user, size and accepted model) in time no later than the
    next: up to each slot of the earlier one's window, its share started by then >= the later one's (a
    job's first start taken back counts from its arrival; a late start, after the window, is free)."""
    queues: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        key = (job.cluster, tuple(sorted(job.regions)), job.priority, job.user, job.nodes, job.provisioning)
        queues.setdefault(key, []).append(i)
    by: dict[int, dict[int, int]] = {}

    def started_by(i: int) -> dict[int, int]:
        """Columns, made once a job: its share started in time by each slot of its window (taken-back
        first starts left out; the earlier job's rows add them)."""
        if i not in by:
            first, last, starts = in_time[i]
            by[i], previous = {}, None
            for t in range(first, last + 1):
                by[i][t] = col = lp.column()
                row = lp.row()  # col = previous + the starts in slot t
                lp.add(row, col, 1.0)
                if previous is not None:
                    lp.add(row, previous, -1.0)
                for start in starts.get(t, []):
                    lp.add(row, start, -1.0)
                previous = col
        return by[i]

    for queue in queues.values():
        queue.sort(key=lambda i: jobs[i].submit_s)  # stable: ties keep the jobs' order
        for i, j in zip(queue, queue[1:]):
            first_j, last_i = in_time[j][0], in_time[i][1]
            early, later, taken = started_by(i), started_by(j), in_time[i][2].get(-1, [])
            for t in range(first_j, last_i + 1):  # later(t) <= early(t) + its taken-back starts
                row = lp.row(at_most=True)
                lp.add(row, later[t], 1.0)
                lp.add(row, early[t], -1.0)
                for start in taken:
                    lp.add(row, start, -1.0)


def _drops(scenario: Scenario, slots: int, slot_s: float) -> dict[tuple[str, str], tuple[np.ndarray, ...]]:
    """(region, spot's capacity key) -> per slot: how many spot VMs its zones' drops can take back, how
    many drops there are, and the sum over them of the region's capacity just before each."""
    out: dict[tuple[str, str], tuple[np.ndarray, ...]] = {}
    for cluster in scenario.clusters:
        key, kinds = spot_identity(cluster), capacity_types(scenario, cluster)["spot"]
        for region, zones in cluster.zones.items():
            if (region, key) in out:
                continue
            units, moments, room = np.zeros(slots), np.zeros(slots), np.zeros(slots)
            for zone in zones:
                own = kinds.get(zone, cluster.machine_type)
                before, t = scenario.capacity.capacity(zone, own, 0.0), scenario.capacity.next_change(zone, own, 0.0)
                while t is not None and t < slots * slot_s:
                    after = scenario.capacity.capacity(zone, own, t)
                    if after < before:  # at most the VMs it removes are taken back
                        units[int(t // slot_s)] += min(before, UNLIMITED) - after
                        moments[int(t // slot_s)] += 1
                        room[int(t // slot_s)] += sum(scenario.capacity.capacity(
                            z, kinds.get(z, cluster.machine_type), t - 1e-6) for z in zones)
                    before, t = after, scenario.capacity.next_change(zone, own, t)
            room[room >= UNLIMITED] = math.inf
            out[(region, key)] = (units, moments, room)
    return out


def _finish(lp: _Lp, tau: int, late: list[int]) -> tuple[float, float]:
    from scipy.optimize import linprog  # the solver's import (0.8 s) only where a bound is solved
    from scipy.sparse import coo_matrix

    matrix = coo_matrix((lp.vals, (lp.rows, lp.cols)), shape=(lp.n_rows, len(lp.cost))).tocsr()
    at_most = np.zeros(lp.n_rows, dtype=bool)
    at_most[lp.upper_rows] = True
    rhs = np.zeros(lp.n_rows)
    for row, value in lp.rhs.items():
        rhs[row] = value
    result = linprog(np.array(lp.cost), A_ub=matrix[at_most], b_ub=rhs[at_most], A_eq=matrix[~at_most],
                     b_eq=rhs[~at_most], bounds=np.column_stack([np.zeros(len(lp.cost)), lp.upper]),
                     method=METHOD)
    if result.status != 0:
        raise RuntimeError(f"the dollar bound's LP did not solve: {result.message}")
    scale = result.x[tau]
    late_share = float(np.sum(result.x[late])) / scale / len(late) if late else 0.0
    return float(result.fun), late_share

