"""GCE's provisioning models as Zen names them, and the pools a cluster's VMs come from.

A cluster may use several models (its ``provisioning`` list, the first one its primary). Each (region,
model) is one pool: one regional MIG in production, one simulated MIG in ``zen simulate``, one key of
the scaling planner's per-"region" maps. The primary model's pool is keyed by the bare region, as every
pool was before a cluster could list models, so a cluster with one model keeps its MIG names, planner
memory and decisions unchanged; another model's pool is ``<region>/<model>``.

- ``spot``: Spot VMs, the cheapest, preemptible at any time with about 30 s notice;
- ``standard``: on-demand VMs, never preempted;
- ``flex-start``: Dynamic Workload Scheduler, asked for through MIG resize requests that are granted
  all at once when capacity frees up, at a discount, for a bounded run duration.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Collection, Iterable

from pydantic import BeforeValidator

MODELS = ("spot", "standard", "flex-start")
ANY = "any"  # a job that accepts every model its cluster lists
_SEP = "/"
PENDING_SEP = "+"  # in the names flex-start VMs go by while their resize request waits: <MIG>+<request>+<n>
MIG_SUFFIX = {"spot": "spot", "standard": "std", "flex-start": "flex"}  # a secondary pool's MIG: <primary MIG>-<suffix>


def check_model(model: str, field: str = "provisioning") -> str:
    """``model`` when GCE has it, else a ValueError naming ``field`` and the known models."""
    if model not in MODELS:
        raise ValueError(f"{field}: unknown provisioning model {model!r}; known: {', '.join(MODELS)}")
    return model


def check_accepted(value: object, field: str = "provisioning") -> str:
    """What a job accepts: one model, or ``any`` (every model its cluster lists). Anything but a string
    (a list of models, a number) is refused saying what is accepted: pydantic said only "a valid string"."""
    if not isinstance(value, str):
        several = " (to accept several of its cluster's models, give any)" if isinstance(value, list) else ""
        raise ValueError(f"{field}: one provisioning model, written as text: {', '.join(MODELS)}, or {ANY} (every "
                         f"model its cluster lists); not {str(value)[:40]}{several}")
    if value != ANY and value not in MODELS:
        raise ValueError(f"{field}: unknown provisioning model {value!r}; known: {', '.join(MODELS)}, or {ANY} "
                         "(every model its cluster lists)")
    return value


Accepted = Annotated[str, BeforeValidator(check_accepted)]  # a message's ``provisioning``: checked before its type


def only_model(accepts: object) -> str | None:
    """The one model a job's ``provisioning`` accepts; None where it accepts any (``any``, or none named)."""
    return None if accepts in (None, ANY) else str(accepts)


def accepted_models(accepts: str | None, models: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The models of a cluster listing ``models`` that a job accepting ``accepts`` (None: any) may use,
    in the cluster's order."""
    return tuple(models) if only_model(accepts) is None else tuple(m for m in models if m == accepts)


def pool_key(region: str, model: str, primary: str) -> str:
    """The pool of ``model`` VMs in ``region`` of a cluster whose first model is ``primary``."""
    return region if model == primary else f"{region}{_SEP}{model}"


def blocked_for(regions: Iterable[str], accepts: str | None, models: list[str] | tuple[str, ...],
                blocked: Collection[str], longest: float | None = None, flex_run_s: float = float("inf")) -> frozenset[str]:
    """The ``regions`` where a stockout blocks (``blocked``: the planner's memory, by pool) every pool a job accepting
    ``accepts`` may use of a cluster using ``models``: where it could only wait. A region is not a pool: with several
    models, one blocked pool of a region leaves the others (a spot job was passed over for blocked standard pools).
    A job whose named ``max_runtime_s`` (``longest``) outlasts a flex-start VM's run (``flex_run_s``) uses no
    flex-start pool (``outlasts_flex``): those leave it nothing."""
    usable = tuple(m for m in accepted_models(accepts, models) if m != "flex-start" or not outlasts_flex(longest, flex_run_s))
    return frozenset(r for r in regions if usable and all(pool_key(r, m, models[0]) in blocked for m in usable))


def model_of_pool(pool: str, models: list[str] | tuple[str, ...]) -> str:
    """The provisioning model of a pool (``pool_key``'s) of a cluster using ``models`` (its first the primary)."""
    return pool.split(_SEP, 1)[1] if _SEP in pool else models[0]


def region_of(pool: str) -> str:
    """The region of a pool (``pool_key``'s)."""
    return pool.split(_SEP, 1)[0]


def pools_of(regions: list[str] | tuple[str, ...], models: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Every pool of a cluster using ``models`` (its first the primary) in ``regions``: region by region
    in the cluster's preference order, each region's models in the cluster's order."""
    primary = models[0]
    return tuple(pool_key(r, m, primary) for r in regions for m in models)


# A flex-start VM that has run for less than this (plus the boot estimate) is taken to be the one asked for the job
# claiming it: every claim it makes may win (else a job whose max_runtime_s is its cluster's flex_start_run_s could
# never start). A VM that booted slowly is not: its run is counted from when it was RUNNING.
FLEX_FRESH_S = 600.0


def flex_run_left_s(run_s: float, now: datetime, first_heard: datetime | None, running_at: datetime | None,
                    boot_estimate_s: float) -> float | None:
    """Seconds a flex-start VM whose agent first spoke at ``first_heard`` (None: not yet, now) has left of its run
    (``run_s``, its cluster's ``flex_start_run_s``; GCE deletes it then) at ``now``. GCE counts the run from when the
    VM is RUNNING (it sets the VM's termination time then): from ``running_at``, when a scaling pass first saw it
    RUNNING (the tick's ``mig_instances.running_at``), or from ``boot_estimate_s`` before that first word, whichever
    is earlier (a VM whose startup took an hour has an hour less than its first word says); None for a VM that has
    run for less than ``FLEX_FRESH_S`` plus the boot estimate, so counted (the one asked for the job: not held to
    it; one whose agent first spoke an hour after it was RUNNING is held to it from its first claim). A job whose
    ``max_runtime_s``, and the margin after it, exceed it may not start there (``flex_too_short``)."""
    heard_s = (now - first_heard).total_seconds() if first_heard is not None else 0.0
    ran_s = max(heard_s + boot_estimate_s, (now - running_at).total_seconds() if running_at is not None else 0.0)
    if ran_s < FLEX_FRESH_S + boot_estimate_s:
        return None
    return run_s - ran_s


def flex_too_short(left_s: float | None, max_runtime_s: float, margin_s: float) -> bool:
    """Whether a flex-start VM with ``left_s`` of its run left (``flex_run_left_s``; None: not held to it) ends it
    before a job that may run ``max_runtime_s`` has ended its attempt: stopped at ``max_runtime_s`` the job still
    has its stop grace, its last checkpoint's save, its outputs' upload and its final report to do (``margin_s``,
    ``deadlines.flex_end_margin_s``), and GCE deletes the VM at the end of its run whatever it is doing: a job cut
    there runs again. The claims refuse such a job (``zen.jobs.claims``) and the planner counts no such VM for
    it (``zen.scaling.flexrun``), both from this."""
    return left_s is not None and left_s < max_runtime_s + margin_s


def outlasts_flex(max_runtime_s: float | None, run_s: float) -> bool:
    """Whether a job that named ``max_runtime_s`` may run longer than any flex-start VM lives (``run_s``):
    no flex-start VM takes it, fresh or not, and its demand lists no flex-start pool."""
    return max_runtime_s is not None and max_runtime_s > run_s
