"""The ``jobs:`` section of a scenario, as it is written: synthetic draws, the Philly trace, or Zen's job CSV.
Its own module so that ``zen_dev.sim.scenario`` checks it at load, where its lines are known, and
``zen_dev.sim.jobs`` (which reads scenarios) builds the jobs from it.
Formats: docs/reference/simulator.md#job-traces
"""

from __future__ import annotations

import math
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from zen.core.checkpoints import MAX_EVERY_S, MIN_EVERY_S
from zen.core.provisioning import ANY, check_accepted
from zen_dev.capacity.scenario import BootSpec, LognormalBoot
from zen_dev.sim.written import drawable

PHILLY_FILE = "${traces}/philly-jobs/philly_jobs_ge4gpu.csv"

DistSpec = BootSpec  # fixed / lognormal / uniform, in seconds


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # .inf/.nan: refused, named


class PoissonArrivals(_Spec):
    kind: Literal["poisson"] = "poisson"
    rate_per_hour: float = Field(gt=0)


class BurstArrivals(_Spec):
    kind: Literal["burst"]
    at_s: float = Field(default=0, ge=0)
    spread_s: float = Field(default=0, ge=0)


class AllowSpec(_Spec):
    weight: float = Field(default=1, gt=0)
    regions: list[str] | None = None


class DataSpec(_Spec):
    fraction: float = Field(default=1.0, ge=0, le=1)
    size_gb: float = Field(gt=0)
    datasets: int | None = Field(default=None, ge=1, description="Distinct datasets per region; None: one per job")


class SyntheticJobs(_Spec):
    kind: Literal["synthetic"] = "synthetic"
    count: int = Field(default=300, ge=1, le=1_000_000)  # no jobs: nothing to compare the policies on
    start_s: float = Field(default=0, ge=0)
    arrivals: PoissonArrivals | BurstArrivals = PoissonArrivals(rate_per_hour=60)
    duration: DistSpec = LognormalBoot(dist="lognormal", median_s=1800, sigma=0.8)
    clusters: dict[str, float] | None = None
    allow: list[AllowSpec] = [AllowSpec()]
    priorities: dict[int, float] = {0: 1}
    data: DataSpec | None = None
    checkpoint_every_s: float | None = Field(default=None, ge=MIN_EVERY_S, le=MAX_EVERY_S, description=(
        "Every job checkpoints this often (seconds, as a job's checkpoint.every allows)"))
    nodes: dict[int, float] = Field(default={1: 1}, description="Nodes per job -> weight (> 1: gangs)")
    provisioning: dict[str, float] = Field(default={ANY: 1}, description=(
        "The provisioning model a job accepts -> weight (spot, standard, flex-start, or any)"))
    max_start_wait_s: dict[float, float] | None = Field(default=None, description=(
        "A job's own start bound in seconds -> weight; None: every job its cluster's"))

    _finite_draws = field_validator("duration")(drawable)

    @field_validator("max_start_wait_s")
    @classmethod
    def _bounds(cls, weights: dict[float, float] | None) -> dict[float, float] | None:
        for bound in weights or {}:
            if not 0 <= bound < math.inf:
                raise ValueError(f"a start bound is seconds >= 0 (got {bound:g})")
        return weights

    @field_validator("clusters", "priorities", "nodes", "max_start_wait_s")
    @classmethod
    def _drawable(cls, weights: dict[Any, float] | None, info: ValidationInfo) -> dict[Any, float] | None:
        """Each weight > 0: a table whose weights sum to 0 cannot be drawn from (random.choices), and a
        negative weight is no share of the draws. An empty ``clusters`` is every cluster alike, as before."""
        if weights is None or (not weights and info.field_name == "clusters"):
            return weights
        if not weights:
            raise ValueError("lists at least one value -> weight (or leave it out)")
        for key, weight in weights.items():
            if not weight > 0:
                raise ValueError(f"the weight of {key} must be > 0 (got {weight:g})")
        return weights


def references(spec: SyntheticJobs, clusters: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]
               ) -> list[tuple[tuple, str]]:
    """Each (location, sentence) where synthetic jobs name what the scenario's clusters (name -> (regions, models))
    do not have: a cluster ``jobs.clusters`` names, fewer than one node a job, an ``allow`` entry leaving a cluster jobs go to no region, a model
    in ``jobs.provisioning`` that is unknown or that a cluster jobs go to does not list. Checked at load, where the
    location gives the line, and again where the jobs are drawn."""
    out: list[tuple[tuple, str]] = []
    unknown = sorted(set(spec.clusters or ()) - set(clusters))
    if unknown:
        out.append((("jobs", "clusters", unknown[0]), f"jobs.clusters names unknown cluster(s): {', '.join(unknown)}"))
    if any(n < 1 for n in spec.nodes):
        out.append((("jobs", "nodes"), f"jobs.nodes: nodes per job are >= 1 (got {sorted(spec.nodes)})"))
    drawn = [name for name in (spec.clusters or clusters) if name in clusters]
    for i, allow in enumerate(spec.allow):
        for name in drawn:
            if allow.regions and not set(allow.regions) & set(clusters[name][0]):
                out.append((("jobs", "allow", i, "regions"), f"jobs.allow {allow.regions} leaves cluster {name} no region"))
    for accepts, weight in spec.provisioning.items():
        try:
            check_accepted(accepts, "jobs.provisioning")
        except ValueError as exc:
            out.append((("jobs", "provisioning", accepts), str(exc)))
            continue
        if not weight > 0:
            out.append((("jobs", "provisioning", accepts),
                        f"jobs.provisioning: the weight of {accepts} must be > 0 (got {weight})"))
        out += [(("jobs", "provisioning", accepts), f"jobs.provisioning: {accepts} is not in cluster {name}'s "
                 f"provisioning {list(clusters[name][1])}") for name in drawn
                if accepts != ANY and accepts not in clusters[name][1]]
    return out


class PhillyJobs(_Spec):
    kind: Literal["philly"]
    file: str = PHILLY_FILE
    compression: float = Field(default=10, gt=0)
    max_jobs: int | None = Field(default=None, ge=1)
    gangs: bool = Field(default=False, description=(
        "A job asking for more GPUs than one VM of the largest cluster has runs on ceil(gpus / its GPUs) nodes"))


class CsvJobs(_Spec):
    kind: Literal["csv"]
    file: str


_KINDS: dict[str, type[SyntheticJobs | PhillyJobs | CsvJobs]] = {
    "synthetic": SyntheticJobs, "philly": PhillyJobs, "csv": CsvJobs}


class _Kind(BaseModel):
    """A jobs section's ``kind`` alone: one of the three names."""

    kind: Literal["synthetic", "philly", "csv"]


def validate(raw: dict[str, Any]) -> SyntheticJobs | PhillyJobs | CsvJobs:
    """A jobs section read as its ``kind`` (synthetic when it names none): a ``ValidationError`` names that kind's
    problems only, not every kind's; a kind that is no known name, as one problem of ``kind`` naming the three."""
    named = raw.get("kind", "synthetic")
    kind = _KINDS.get(named) if isinstance(named, str) else None
    return (kind or _KINDS[_Kind.model_validate(raw).kind]).model_validate(raw)
