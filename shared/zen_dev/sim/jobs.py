"""Job traces for the simulator: a synthetic generator, the Philly trace, and Zen's own CSV.

The ``jobs:`` section of a scenario (or ``--jobs``) picks one; a file given to ``--jobs`` is read as
Philly or Zen CSV by its header.
Formats: docs/reference/simulator.md#job-traces
"""

from __future__ import annotations

import csv
import math
import random
import zlib
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from zen.core.checkpoints import MAX_EVERY_S, MIN_EVERY_S
from zen.core.provisioning import ANY, check_accepted
from zen_dev.capacity.scenario import FixedBoot, UniformBoot
from zen_dev.sim.jobspec import (PHILLY_FILE as PHILLY_FILE, CsvJobs, DataSpec, DistSpec, PhillyJobs, PoissonArrivals,
                                 SyntheticJobs, references, validate)
from zen_dev.sim.scenario import Scenario, SimCluster, TraceUnavailable, resolve_path

PHILLY_COLUMNS = ("jobid", "submitted_time", "num_gpus", "runtime_min")
ZEN_COLUMNS = ("job_id", "submit_s", "duration_s", "cluster")

class JobTraceError(ValueError):
    """A job trace cannot be used; the message says which file or field and why."""


class JobTraceUnavailable(TraceUnavailable, JobTraceError):
    """The Philly trace a run needs (``kind: philly``, or ``--jobs philly``) is absent: skip rather than fail, as
    for an absent capacity trace (``zen simulate`` exits 3). A file given to ``--jobs`` that cannot be read is a
    ``JobTraceError``: the user's own input."""


@dataclass(frozen=True)
class SimJob:
    job_id: str
    cluster: str
    submit_s: float
    duration_s: float
    regions: tuple[str, ...]  # allowed, in the cluster's preference order
    priority: int = 0
    user: str | None = None  # for queues (a scenario's ``queues:``): the user's queue admits it
    input_gb: float = 0.0  # input read at start; it crosses regions unless it runs in data_region
    data_region: str | None = None
    dataset: str | None = None  # what a VM's warm cache keeps (zen_dev.sim.world): same name, same input
    checkpoint_every_s: float | None = None  # it saves its work this often: a preemption loses only the rest
    nodes: int = 1  # > 1: a gang (multi-node job, zen.core.gang): that many VMs of its cluster, in one region
    # The provisioning model it accepts (zen.core.provisioning: spot, standard, flex-start), None: any its cluster
    # lists. A policy that keeps to one model (the baselines but cheapest-first) runs every job on it.
    provisioning: str | None = None
    # Its own max_runtime_s (a CSV's column), None: the scenario's limits.max_runtime_s, as production's request
    # without one gets. Each attempt runs at most this long, then the job is stopped there, FAILED (zen_dev.sim.world).
    max_runtime_s: float | None = None
    # Its own start bound (production's request ``max_start_wait_s``), None: its cluster's. Queued that long, its demand
    # ranks pools by speed (``zen.scaling.ranking.patient``); before, it may wait for a cheaper pool.
    max_start_wait_s: float | None = None


def sample(dist: DistSpec, rng: random.Random) -> float:
    """One draw, in seconds."""
    if isinstance(dist, FixedBoot):
        return dist.s
    if isinstance(dist, UniformBoot):
        return rng.uniform(dist.low_s, dist.high_s)
    return rng.lognormvariate(math.log(dist.median_s), dist.sigma) if dist.sigma else dist.median_s


def parse_jobs_spec(raw: dict[str, Any] | None) -> SyntheticJobs | PhillyJobs | CsvJobs:
    try:
        return validate(raw or {"kind": "synthetic"})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise JobTraceError(f"jobs.{where}: {first['msg']}") from None


def load_jobs(scenario: Scenario, source: str | None = None, *, seed: int | None = None,
              compression: float | None = None, max_jobs: int | None = None) -> list[SimJob]:
    """The job trace: ``source`` is ``synthetic``, ``philly``, a CSV path, or None (the scenario's)."""
    spec_raw = scenario.spec.jobs
    if source == "synthetic" and (spec_raw or {}).get("kind", "synthetic") != "synthetic":
        spec_raw = None
    elif source == "philly":  # the scenario's own Philly settings (gangs, compression, file) kept
        spec_raw = {**(spec_raw if (spec_raw or {}).get("kind") == "philly" else {}), "kind": "philly"}
    elif source not in (None, "synthetic"):
        spec_raw = {"kind": "csv", "file": source}
    spec = parse_jobs_spec(spec_raw)
    if isinstance(spec, SyntheticJobs):
        if compression is not None:
            raise JobTraceError("--compression compresses a trace's time (--jobs philly or a job CSV); synthetic jobs "
                                "are drawn at the scenario's rates: change jobs.arrivals instead")
        jobs = synthetic_jobs(spec, scenario.clusters, scenario.spec.seed if seed is None else seed)
        return _taken_by_production(jobs[:max_jobs] if max_jobs else jobs, scenario,
                                    f"scenario {scenario.name}, jobs (synthetic: jobs.nodes, jobs.duration, jobs.provisioning)")
    path = scenario.resolve(spec.file) if source in (None, "philly") else resolve_path(spec.file, Path.cwd())
    if isinstance(spec, PhillyJobs):
        if not path.exists():
            raise JobTraceUnavailable(scenario.name, [(None, f"the Philly job trace {path} is absent")])
        spec = spec.model_copy(update={k: v for k, v in (("compression", compression), ("max_jobs", max_jobs)) if v})
        return _taken_by_production(_some(philly_jobs(path, scenario.clusters, spec.compression, spec.max_jobs,
                                                      spec.gangs), path), scenario, str(path))
    return _taken_by_production(_some(csv_jobs(path, scenario.clusters, compression=compression, max_jobs=max_jobs),
                                      path), scenario, str(path))


def _some(jobs: list[SimJob], path: Path) -> list[SimJob]:
    """``jobs``, unless the trace held none (a header alone): a run of no jobs compares the policies on nothing."""
    if not jobs:
        raise JobTraceError(f"{path}: no jobs, only a header: give the trace at least one job row")
    return jobs


def _taken_by_production(jobs: list[SimJob], scenario: Scenario, where: str) -> list[SimJob]:
    """``jobs``, unless one is a job production refuses at submission: a gang its cluster's limits can never
    hold (``zen.jobs.placement.check_nodes``: ``nodes`` above ``max_vms_per_region`` or ``max_vms``), one whose own
    ``max_runtime_s`` is above the scenario's ``limits.max_runtime_s`` (``zen.jobs.placement.resolve_request``), or one
    that accepts flex-start alone (its own provisioning, or its cluster's only model) where production refuses
    it (``zen.jobs.placement.check_provisioning``): a start bound (the cluster's ``max_start_wait_s``, else the
    scenario's timing) below ``flex_start_min_wait_s``, or a ``max_runtime_s`` (its own; without one, its run) longer
    than a flex-start VM lives
    (``flex_start_run_s``). An outside harness measured jobs production never takes. ``where``: the jobs' source, each
    refusal's first words (a synthetic job's id alone named no file a harness wrote)."""
    clusters = {c.limits.name: c for c in scenario.clusters}
    configs = {c.name: c for c in scenario.spec.clusters}
    limit = scenario.spec.limits.max_runtime_s
    for job in jobs:
        if (too_many := configs[job.cluster].nodes_problem(job.nodes)) is not None:
            raise JobTraceError(f"{where}: job {job.job_id}: {too_many}: production refuses such a job; lower its nodes, "
                                "or raise the cluster's limits")
        if job.max_runtime_s is not None and job.max_runtime_s > limit:  # as zen.jobs.placement refuses it
            raise JobTraceError(f"{where}: job {job.job_id}: max_runtime_s {job.max_runtime_s:g} is above the limit "
                                f"{limit} (limits.max_runtime_s): production refuses such a job; lower it, or raise the "
                                "scenario's limits.max_runtime_s")
        cluster = clusters[job.cluster]
        if ((job.provisioning,) if job.provisioning else cluster.models) != ("flex-start",):
            continue
        if job.max_start_wait_s is not None:  # its own first, as production's
            bound, named = job.max_start_wait_s, "its max_start_wait_s"
        elif cluster.max_start_wait_s is not None:
            bound, named = cluster.max_start_wait_s, f"cluster {job.cluster}'s max_start_wait_s"
        else:
            bound, named = scenario.timing.max_start_wait_s, "timing.max_start_wait_s"
        if bound < cluster.flex_min_wait_s:
            raise JobTraceError(
                f"{where}: job {job.job_id} accepts flex-start alone, and {named} ({bound:g} s) "
                f"is below its flex_start_min_wait_s ({cluster.flex_min_wait_s:g} s): production refuses such a job; "
                "allow a longer max_start_wait_s, or let the job accept another model (provisioning)")
        # Production compares the job's max_runtime_s; one a trace does not give stands for a limit its run fits.
        run, what = ((job.max_runtime_s, "may run (max_runtime_s)") if job.max_runtime_s is not None
                     else (job.duration_s, "runs"))
        if run > cluster.flex_run_s:
            raise JobTraceError(
                f"{where}: job {job.job_id} accepts flex-start alone and {what} {run:g} s, longer than a flex-start VM "
                f"of cluster {job.cluster} lives (flex_start_run_s {cluster.flex_run_s:g} s): production refuses such a "
                "job; raise flex_start_run_s, or let the job accept another model (provisioning)")
    return jobs


def _allowed(regions: list[str] | tuple[str, ...] | None, cluster: SimCluster) -> tuple[str, ...]:
    if not regions:
        return cluster.limits.regions
    return tuple(r for r in cluster.limits.regions if r in regions)


def _weighted(rng: random.Random, items: list[Any], weights: list[float]) -> Any:
    return rng.choices(items, weights=weights, k=1)[0]


def synthetic_jobs(spec: SyntheticJobs, clusters: list[SimCluster], seed: int) -> list[SimJob]:
    """Jobs from ``spec``; the same seed gives the same trace."""
    rng = random.Random(f"jobs-{seed}")
    by_name = {c.limits.name: c for c in clusters}
    refused = references(spec, {name: (c.limits.regions, c.models) for name, c in by_name.items()})
    if refused:
        raise JobTraceError(refused[0][1])
    mix = spec.clusters or {name: 1.0 for name in by_name}
    names, weights = list(mix), list(mix.values())
    prios, prio_weights = list(spec.priorities), list(spec.priorities.values())
    gangs = random.Random(f"nodes-{seed}") if spec.nodes != {1: 1} else None  # its own draws: the rest unchanged
    node_counts, node_weights = list(spec.nodes), list(spec.nodes.values())
    accepts = _provisioning(spec.provisioning)
    models = random.Random(f"provisioning-{seed}") if accepts else None  # its own draws: the rest unchanged
    waits = random.Random(f"max-start-wait-{seed}") if spec.max_start_wait_s else None  # (its own draws too)
    jobs, t = [], spec.start_s
    for i in range(spec.count):
        if isinstance(spec.arrivals, PoissonArrivals):
            t += rng.expovariate(spec.arrivals.rate_per_hour / 3600.0)
            submit = t
        else:
            submit = spec.arrivals.at_s + (rng.uniform(0, spec.arrivals.spread_s) if spec.arrivals.spread_s else 0.0)
        cluster = by_name[_weighted(rng, names, weights)]
        allow = _weighted(rng, spec.allow, [a.weight for a in spec.allow])
        jobs.append(SimJob(
            job_id=f"job-{i:06d}", cluster=cluster.limits.name, submit_s=submit,
            duration_s=max(1.0, sample(spec.duration, rng)),
            regions=_allowed(allow.regions, cluster), priority=_weighted(rng, prios, prio_weights),
            checkpoint_every_s=spec.checkpoint_every_s,
            nodes=_weighted(gangs, node_counts, node_weights) if gangs else 1,
            provisioning=_weighted(models, list(accepts), list(accepts.values())) if models else None,
            max_start_wait_s=(_weighted(waits, list(spec.max_start_wait_s), list(spec.max_start_wait_s.values()))
                              if waits and spec.max_start_wait_s else None),
        ))
    if spec.data:
        jobs = _with_data(jobs, spec.data, random.Random(f"data-{seed}"))  # its own draws: the rest stays the same
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs


def _provisioning(weights: dict[str, float]) -> dict[str | None, float]:
    """``jobs.provisioning`` (checked: ``references``), ``any`` as None; empty where every job accepts any model
    (no draws)."""
    out = {None if accepts == ANY else accepts: weight for accepts, weight in weights.items()}
    return {} if list(out) == [None] else out


def _data_first(job: SimJob, region: str, input_gb: float, dataset: str | None = None) -> SimJob:
    ordered = (region,) + tuple(r for r in job.regions if r != region)
    return replace(job, regions=ordered, input_gb=input_gb, data_region=region,
                   dataset=dataset or f"{region}/{job.job_id}")


def _with_data(jobs: list[SimJob], data: DataSpec, rng: random.Random) -> list[SimJob]:
    def dataset(job: SimJob, region: str) -> str | None:
        return f"{region}/d{zlib.crc32(job.job_id.encode()) % data.datasets}" if data.datasets else None

    return [_data_first(job, region := rng.choice(job.regions), data.size_gb, dataset(job, region))
            if rng.random() < data.fraction else job for job in jobs]


def _read_csv(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """(the file's line each row ends on, the row): a blank line or a quoted cell of several lines moves it."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # a spreadsheet's byte-order mark ignored
            reader = csv.DictReader(handle, skipinitialspace=True)  # "job_id, submit_s, ..." as "job_id,submit_s,..."
            if reader.fieldnames:  # a name or a value as the column means it, spaces before a comma too
                reader.fieldnames = [name.strip() for name in reader.fieldnames]
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise JobTraceError(f"{path}: missing column(s) {', '.join(missing)}")
            return [(reader.line_num, {k: v.strip() if isinstance(v, str) else v for k, v in row.items()})
                    for row in reader]
    except OSError as exc:
        raise JobTraceError(f"cannot read job trace {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise JobTraceError(f"cannot read job trace {path}: not UTF-8 text (byte {exc.start}): save it as UTF-8") from None


def _field(row: dict[str, str], name: str, kind: type, default: Any = ...) -> Any:
    """A row's ``name`` column read as ``kind`` (int or float, finite), ``default`` where it is empty (no
    default: required); a ValueError that names the column."""
    text = (row.get(name) or "").strip()
    if not text and default is not ...:
        return default
    try:
        value = kind(text) if kind is not int else _integer(text)
    except ValueError:
        raise ValueError(f"{name} is {'an integer' if kind is int else 'a number'} (got {text!r})") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} is a finite number (got {text!r})")
    return value


def _integer(text: str) -> int:
    """An integer, written as one or as a float with nothing after the point (``1.0``: pandas writes an integer
    column with blanks in it so)."""
    whole, point, zeros = text.partition(".")
    return int(whole if point and zeros.strip("0") == "" and whole.strip("+-") else text)  # 1e3, 1.5: ValueError


def _unique(seen: dict[str, int], job_id: str, path: Path, line: int) -> None:
    """Refuse a job id already read (on line ``seen[job_id]``): the runs key jobs by id."""
    if job_id in seen:
        raise JobTraceError(f"{path} line {line}: job id {job_id!r} is on line {seen[job_id]} too: each job needs its own")
    seen[job_id] = line


def philly_jobs(path: Path, clusters: list[SimCluster], compression: float = 10,
                max_jobs: int | None = None, gangs: bool = False) -> list[SimJob]:
    """The Philly trace, time-compressed, first ``max_jobs`` by submission time. With ``gangs``, a job
    asking for more GPUs than one VM of the largest cluster has is a gang of ceil(gpus / its GPUs) nodes
    there; without, it runs on one VM of the largest cluster."""
    rows = _read_csv(path, PHILLY_COLUMNS)
    by_size = sorted(clusters, key=lambda c: c.gpu_count)
    parsed = []
    seen: dict[str, int] = {}
    for n, row in rows:
        try:
            submitted = datetime.fromisoformat(row["submitted_time"])
            gpus, runtime_min = _field(row, "num_gpus", int), _field(row, "runtime_min", float)
            if gpus < 1:  # ran on the smallest cluster (with gangs, as a gang of no node)
                raise ValueError(f"num_gpus is an integer >= 1 (got {gpus})")
            if runtime_min < 0:  # ran as 1 s
                raise ValueError(f"runtime_min is minutes >= 0 (got {runtime_min:g})")
        except (TypeError, ValueError) as exc:
            raise JobTraceError(f"{path} line {n}: {exc}") from None
        _unique(seen, row["jobid"], path, n)
        parsed.append((submitted, row["jobid"], gpus, runtime_min))
    parsed.sort()
    parsed = parsed[:max_jobs] if max_jobs else parsed
    if not parsed:
        return []
    t0 = parsed[0][0]
    jobs = []
    for submitted, job_id, gpus, runtime_min in parsed:
        cluster = next((c for c in by_size if c.gpu_count >= gpus), by_size[-1])
        jobs.append(SimJob(
            job_id=job_id, cluster=cluster.limits.name,
            submit_s=(submitted - t0).total_seconds() / compression,
            duration_s=max(1.0, runtime_min * 60.0 / compression), regions=cluster.limits.regions,
            nodes=math.ceil(gpus / cluster.gpu_count) if gangs else 1,
        ))
    return jobs


def csv_jobs(path: Path, clusters: list[SimCluster], *, compression: float | None = None,
             max_jobs: int | None = None) -> list[SimJob]:
    """Zen's job CSV (``compression`` default 1), or a Philly-format file, recognised by its header and read
    as ``kind: philly`` reads it (its default compression, 10)."""
    with_header = _read_csv(path, ())
    if with_header and all(c in with_header[0][1] for c in PHILLY_COLUMNS):
        return philly_jobs(path, clusters, compression or PhillyJobs.model_fields["compression"].default, max_jobs)
    compression = compression or 1.0
    rows = _read_csv(path, ZEN_COLUMNS)
    by_name = {c.limits.name: c for c in clusters}
    jobs = []
    seen: dict[str, int] = {}
    for n, row in rows:
        _unique(seen, row["job_id"], path, n)
        cluster = by_name.get(row["cluster"])
        if cluster is None:
            raise JobTraceError(f"{path} line {n}: unknown cluster {row['cluster']!r}")
        wanted = [r.strip() for r in (row.get("regions") or "").split(";") if r.strip()]
        regions = _allowed(wanted, cluster)
        if outside := [r for r in wanted if r not in cluster.limits.regions]:  # production refuses it at submission
            raise JobTraceError(f"{path} line {n}: regions {outside} are not regions of {cluster.limits.name} "
                                f"{list(cluster.limits.regions)}")
        try:
            submit, duration = _field(row, "submit_s", float), _field(row, "duration_s", float)
            if submit < 0 or duration < 0:  # a job before the run began, or one that ends before it starts
                raise ValueError(f"{'submit_s' if submit < 0 else 'duration_s'} is seconds >= 0 "
                                 f"(got {min(submit, duration):g})")
            job = SimJob(row["job_id"], cluster.limits.name, submit / compression,
                         max(1.0, duration / compression), regions, _field(row, "priority", int, 0))
            nodes = _field(row, "nodes", int, 1)
            if nodes < 1:
                raise ValueError(f"nodes is an integer >= 1 (got {nodes})")
            job = replace(job, nodes=nodes) if nodes > 1 else job
            every = _field(row, "checkpoint_every_s", float, None)
            if every is not None:
                if not MIN_EVERY_S <= every <= MAX_EVERY_S:  # a job's checkpoint.every allows no other
                    raise ValueError(f"checkpoint_every_s is seconds from {MIN_EVERY_S} to {MAX_EVERY_S} (got {every:g})")
                job = replace(job, checkpoint_every_s=every / compression)  # a time of the trace, as its run's
            limit = _field(row, "max_runtime_s", float, None)
            if limit is not None:
                if not limit > 0:
                    raise ValueError(f"max_runtime_s is seconds > 0 (got {limit:g})")
                job = replace(job, max_runtime_s=limit / compression)  # a time of the trace, as its run's
            wait = _field(row, "max_start_wait_s", float, None)
            if wait is not None:
                if not wait >= 0:
                    raise ValueError(f"max_start_wait_s is seconds >= 0 (got {wait:g})")
                job = replace(job, max_start_wait_s=wait / compression)  # a time of the trace, as its run's
            accepts = (row.get("provisioning") or "").strip()
            if accepts and check_accepted(accepts) != ANY:
                if accepts not in cluster.models:
                    raise ValueError(f"provisioning {accepts!r} is not in cluster {cluster.limits.name}'s "
                                     f"provisioning {list(cluster.models)}")
                job = replace(job, provisioning=accepts)
            data_region = (row.get("data_region") or "").strip()
            if data_region:
                if data_region not in regions:
                    raise ValueError(f"data_region {data_region!r} is not one of the job's regions {list(regions)}")
                input_gb = _field(row, "input_gb", float, 0.0)
                if input_gb < 0:
                    raise ValueError(f"input_gb is GB >= 0 (got {input_gb:g})")
                job = _data_first(job, data_region, input_gb,
                                  (row.get("dataset") or "").strip() or None)
            jobs.append(job)
        except ValueError as exc:
            raise JobTraceError(f"{path} line {n}: {exc}") from None
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs[:max_jobs] if max_jobs else jobs
