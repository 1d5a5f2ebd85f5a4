"""A cluster's configuration: one machine shape, its regions and provisioning models, its limits, and how
its agents confine jobs. Part of ``zen.core.config`` (which exports it), kept apart for its size."""

from __future__ import annotations

import math
import re
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from zen.core.provisioning import MIG_SUFFIX, MODELS, check_model, pool_key, pools_of

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}\Z")  # \Z: "$" allows a final "\n"
_MIG_SUFFIX = re.compile(r"[a-z0-9]{4}")  # GCE names a MIG's instances <base>-<4 of these>


def check_models(value: Any) -> list[str]:
    """A ``provisioning`` list: known models (``zen.core.provisioning``), each once."""
    if not isinstance(value, list):
        example = f"[{value}]" if isinstance(value, str) else "[spot, standard]"
        raise ValueError(f"a list of provisioning models, the first the primary (e.g. {example}); "
                         f"not {str(value)[:40]}")
    for model in value:
        check_model(model)
    if twice := sorted({m for m in value if value.count(m) > 1}):
        raise ValueError(f"{', '.join(twice)} is listed twice: list each provisioning model once")
    return value


# Compact placement (``compact: true``) as GCE documents it for a MIG: every VM of a region's MIG in one zone
# (ANY_SINGLE_ZONE), and close together: for MIGs of general-purpose GPU VMs (A2, A3 Edge, A3 High of 1, 2 or 4
# GPUs, G2, G4), a compact placement policy in the instance template, which terraform gives the pool; for A3 High
# of 8 GPUs, A3 Mega, A3 Ultra and A4 (WORKLOAD_POLICY_TYPES), a workload policy on the MIG instead, which the
# google provider terraform pins (< 7.0) cannot attach to a regional MIG: those pools get the one zone alone
# (terraform's local workload_policy_types, the same pattern). A4X requires a workload policy: refused.
COMPACT_FAMILIES = ("a2", "a3", "a4", "g2", "g4")
WORKLOAD_POLICY_TYPES = re.compile(r"^(a3-highgpu-8g|a3-megagpu-|a3-ultragpu-|a4-)")


# What PyYAML (YAML 1.1) leaves a string and YAML 1.2 (terraform's yamldecode) reads as a number: 2.9e1, 1e-05
_EXPONENT = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+\Z")


def _not_bool_or_text(value: Any) -> Any:
    """A number of the configuration is written as one: YAML's ``true``/``yes`` and quoted numbers are refused
    (lax pydantic read ``max_start_wait_s: true`` as 1 s and ``"600"`` as 600), ``8.0`` is still 8, and an
    exponent such as ``2.9e1`` is the number YAML 1.2 reads."""
    if isinstance(value, str) and _EXPONENT.match(value):
        return float(value)
    if isinstance(value, (bool, str)):
        raise ValueError(f"a number, not {value!r}")
    return value


def _a_number(value: Any) -> Any:
    """A number written as one (``_not_bool_or_text``), and no ``.nan``: a bound such as ``gt=0`` told it
    "greater than 0" (``.inf`` is each field's to refuse: ``allow_inf_nan``, or ``Strict``'s check)."""
    value = _not_bool_or_text(value)
    if isinstance(value, float) and math.isnan(value):
        raise ValueError(f"a finite number, not {value}")
    return value


def written_as_number(value: Any) -> bool:
    """Whether ``value``, as a YAML file holds it, is a number written as one (``_not_bool_or_text``)."""
    try:
        _not_bool_or_text(value)
    except ValueError:
        return False
    return True


N = TypeVar("N", int, float)
Number = Annotated[N, BeforeValidator(_a_number)]  # a number inside a mapping or list (Strict's own fields: below)


def _plain_number(annotation: Any) -> bool:
    """Whether a field holds an int or a float (perhaps None), not a bool nor anything else."""
    kinds = set(get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)) - {type(None)}
    return bool(kinds) and kinds <= {int, float}


class Strict(BaseModel):
    """A section of the configuration: unknown keys refused, and every number of it written as one
    (``_not_bool_or_text``: ``heartbeat_timeout_s: yes`` read as 1 s lost every job after a second of
    silence) and finite (``.inf`` is no deadline, price or ratio)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_as_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None or not _plain_number(cls.model_fields[info.field_name].annotation):
            return value
        value = _a_number(value)
        if isinstance(value, float) and math.isinf(value):
            raise ValueError(f"a finite number, not {value}")
        return value


def describe_pull_limits(max_jobs: int | None, max_gpu_hours: float | None) -> str:
    """``2 jobs / 40 GPU-hours in 24 h``: a VM's pull limits as decisions and logs quote them."""
    parts = [f"{max_jobs} jobs" if max_jobs else "", f"{max_gpu_hours:g} GPU-hours" if max_gpu_hours else ""]
    return " / ".join(p for p in parts if p) + " in 24 h" if any(parts) else "no limit"


_RUN_AS = re.compile(r"^(image|[0-9]{1,10}:[0-9]{1,10})\Z")


class ContainerPolicy(Strict):
    """How a cluster's agents confine job containers (zen.agent.container): by default a job runs as
    nobody, with no capabilities, a read-only root filesystem, its slot's memory, CPU and task limits,
    on a network of its own."""

    run_as: str = Field(default="65534:65534", description=(
        "uid:gid a job's container runs as; 'image': the image's own USER (root for most: the opt-out)"))
    network: Literal["job", "none"] = Field(default="job", description=(
        "'job': a bridge network per slot (internet, no neighbours); 'none': no network at all"))
    read_only_root: bool = Field(default=True, description=(
        "A read-only root filesystem (/tmp, /dev/shm, ZEN_SCRATCH_DIR and ZEN_OUTPUT_DIR writable); false for a GPU "
        "runtime whose hooks write into it"))

    @field_validator("run_as")
    @classmethod
    def _run_as_shape(cls, value: str) -> str:
        if not _RUN_AS.match(value):
            raise ValueError("run_as is uid:gid in numbers (e.g. 65534:65534), or 'image'")
        return value


class ClusterConfig(Strict):
    """One machine shape, e.g. ``4xa100-40gb``: 4 A100 40GB per VM."""

    # terraform names its instance template "<MIG>-" (the provider's name_prefix: 54 at most) and its VMs "<MIG>-xxxx"
    _MIG_NAME_MAX: ClassVar[int] = 53

    name: str
    gpu_type: str = Field(description="Accelerator type, e.g. nvidia-tesla-a100")
    gpu_count: int = Field(ge=1, le=16, description="GPUs per VM")
    machine_type: str = Field(default="a2-highgpu-1g", description=(
        "The VMs' machine type (terraform's too); in Zen's configuration, one Zen knows must hold gpu_count x "
        "gpu_type (zen.core.shapes)"))
    regions: list[str] = Field(min_length=1, description="Allowed regions, most preferred first")
    max_vms_per_region: int = Field(ge=0, le=2000, description=(
        "Upper bound on each regional MIG: per region and provisioning model (one MIG each); at most 2000, what a "
        "regional MIG holds (Compute refuses a larger size)"))
    max_vms: int = Field(ge=0, description="Upper bound on the cluster across regions")
    min_vms: int = Field(default=0, ge=0, description="VMs kept even when idle")
    tags: list[str] = Field(default_factory=list, description="Execution groups of all its regions, e.g. [hipaa]")
    region_tags: dict[str, list[str]] = Field(default_factory=dict, description="Region -> its own extra tags")
    # Regions whose MIG predates VM names with a region (base zen-<cluster>, kept by terraform): only there is a
    # VM named zen-<cluster>-xxxx the cluster's (has_instance), not in any region as it was. None by default.
    legacy_vm_regions: list[str] = Field(default_factory=list, description="Regions whose VMs are zen-<cluster>-xxxx")
    # Pull limits (zen.agent.limits): past either, in a trailing 24 h, a VM's agent takes no more jobs,
    # reports RETIRED and the scaling manager deletes the VM once it holds no job. None: no limit.
    max_jobs_per_vm_day: int | None = Field(default=None, ge=1, description="Attempts one VM runs in 24 h")
    max_gpu_hours_per_vm_day: float | None = Field(default=None, gt=0, description="GPUs x hours one VM runs in 24 h")
    # Jobs one VM runs at once (zen.agent.slots): each holds its own GPUs, so a VM takes another job
    # only while its jobs' GPUs plus the new one's fit its gpu_count. 1: a VM runs one job at a time.
    max_jobs_per_vm: int = Field(default=1, ge=1, le=16, description="Jobs one VM runs at once")
    # How its agents confine job containers (zen.agent.container): run_as 'image' is the opt-out from nobody.
    containers: ContainerPolicy = Field(default_factory=ContainerPolicy)
    # The provisioning models its VMs may use (zen.core.provisioning), the first its primary: one MIG per
    # region and model. Its primary pool keeps the MIG name a cluster with one model has always had.
    provisioning: list[str] = Field(default_factory=lambda: ["standard"], min_length=1,
                                    description="Provisioning models it may use: spot, standard, flex-start")
    # How long a job may wait for a start before Zen falls back to a costlier model (a job's own
    # max_start_wait_s overrides it), and the least wait flex-start can be counted on to need: a job that
    # accepts flex-start alone must allow at least that (zen.jobs.placement).
    max_start_wait_s: int = Field(default=600, ge=0, le=2**31 - 1,
                                  description="A job's start bound unless it gives its own (seconds)")
    flex_start_min_wait_s: int = Field(default=300, ge=0, le=2**31 - 1,
                                       description="The least max_start_wait_s of a job that accepts only flex-start")
    # A flex-start VM's run duration (its resize request's requested run duration, terraform's max_run_duration):
    # GCE deletes it after this. At most 7 days.
    flex_start_run_s: int = Field(default=7 * 86400, ge=600, le=7 * 86400,
                                  description="How long a flex-start VM may run (seconds, at most 7 days)")
    # Compact placement (docs/how-to/multi-node.md): every VM of a region's MIG in one zone (target shape
    # ANY_SINGLE_ZONE), close together under a compact placement policy (terraform: a resource policy with
    # collocation COLLOCATED in the template), for a gang's collectives. The price: a region's VMs share one
    # zone's capacity. For the GPU families COMPACT_FAMILIES only; a few types get the zone alone (WORKLOAD_POLICY_TYPES).
    compact: bool = Field(default=False, description="A region's VMs in one zone, close together (gangs)")

    @field_validator("provisioning", mode="before")  # before: pydantic's "at least 1 item" named no model
    @classmethod
    def _known_models(cls, value: Any) -> list[str]:
        if value == []:
            raise ValueError(f"list at least one provisioning model ({', '.join(MODELS)}), the first the primary; "
                             "or leave provisioning out for [standard]")
        return check_models(value)

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError("cluster names are lowercase letters, digits and '-', e.g. 4xa100-40gb")
        return value

    @field_validator("regions")
    @classmethod
    def _unique_regions(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("a region is listed twice")
        return value

    @model_validator(mode="after")
    def _limits(self) -> "ClusterConfig":
        if self.min_vms > self.max_vms:
            raise ValueError(f"min_vms ({self.min_vms}) is above max_vms ({self.max_vms})")
        for field, named in (("region_tags", self.region_tags), ("legacy_vm_regions", self.legacy_vm_regions)):
            if outside := sorted(set(named) - set(self.regions)):
                raise ValueError(f"{field} names regions the cluster does not use: {', '.join(outside)}")
        named = self.tags + [t for tags in self.region_tags.values() for t in tags]
        bad = sorted(t for t in named if not NAME.match(t))
        if bad:
            raise ValueError(f"tags are lowercase letters, digits and '-': {', '.join(bad)}")
        too_long = [self.mig_name(r, m) for r in self.regions for m in self.provisioning or ()
                    if len(self.mig_name(r, m)) > self._MIG_NAME_MAX]
        if too_long:
            raise ValueError(f"the MIG name {too_long[0]!r} is over {self._MIG_NAME_MAX} characters (its instance "
                             "template and VMs are named after it): use a shorter cluster name")
        if self.provisioning == ["flex-start"] and self.max_start_wait_s < self.flex_start_min_wait_s:
            raise ValueError(f"max_start_wait_s ({self.max_start_wait_s}) is below flex_start_min_wait_s "
                             f"({self.flex_start_min_wait_s}) and flex-start is the cluster's only model: every job "
                             "giving no max_start_wait_s would be refused")
        if self.compact and self.machine_type.split("-")[0] not in COMPACT_FAMILIES:
            raise ValueError(f"compact: GCE places only {', '.join(COMPACT_FAMILIES)} machine types compactly, "
                             f"not {self.machine_type}")
        if self.max_jobs_per_vm > self.gpu_count:
            raise ValueError(f"max_jobs_per_vm ({self.max_jobs_per_vm}) is above gpu_count ({self.gpu_count}): "
                             "each job holds at least one GPU")
        return self

    def gpus_held(self, gpu_count: int | None) -> int:
        """The GPUs a job asking for ``gpu_count`` (None: it named the cluster) holds on a VM of this
        cluster: every one of them while a VM runs one job at a time (nobody else may use the rest),
        else its own ``gpu_count``. Queue quotas, the claim check and usage all count this."""
        if self.max_jobs_per_vm == 1 or gpu_count is None:
            return self.gpu_count
        return min(gpu_count, self.gpu_count)

    def tags_of(self, region: str) -> list[str]:
        """The execution groups a VM of this cluster in ``region`` belongs to (sorted)."""
        return sorted(set(self.tags) | set(self.region_tags.get(region, [])))

    def pull_limits_text(self) -> str:
        return describe_pull_limits(self.max_jobs_per_vm_day, self.max_gpu_hours_per_vm_day)

    def mig_name(self, region: str, model: str | None = None) -> str:
        """Name of the regional MIG terraform creates for this cluster (for ``model``: its pool's; the
        primary model's is the cluster's MIG as it always was, another's has the model's suffix)."""
        base = f"zen-{self.name}-{region}"
        return base if model is None or model == self.provisioning[0] else f"{base}-{MIG_SUFFIX[model]}"

    def nodes_problem(self, nodes: int) -> str | None:
        """Why this cluster cannot hold a gang of ``nodes`` (``zen.jobs.placement.check_nodes``), or None. Checked
        again for a gang accepted before its limits were lowered: it is no demand (``zen.scaling.fleetdb``), its
        claims are refused (``zen.jobs.claims``: no VM is held for a gang that can never assemble) and ``zen
        explain`` says why it waits."""
        if nodes == 1:
            return None
        if self.max_jobs_per_vm > 1:
            return (f"nodes: {nodes} nodes on cluster {self.name}, whose VMs run several jobs at once "
                    f"(max_jobs_per_vm {self.max_jobs_per_vm}): a multi-node job holds whole VMs; use a "
                    "cluster with max_jobs_per_vm 1")
        if nodes > self.max_vms:
            return f"nodes: {nodes} is above cluster {self.name}'s max_vms ({self.max_vms})"
        if nodes > self.max_vms_per_region:
            return (f"nodes: {nodes} is above cluster {self.name}'s max_vms_per_region "
                    f"({self.max_vms_per_region}), and a multi-node job runs in one region")
        return None

    def pools(self) -> tuple[str, ...]:
        """Its pool keys (zen.core.provisioning): with one model, its regions."""
        return pools_of(self.regions, self.provisioning)

    def vm_bases(self, region: str) -> tuple[str, ...]:
        """What GCE names this cluster's VMs in ``region`` after (``<base>-<4 of a-z0-9>``): each of its pools'
        MIG names there (terraform's base instance names, the primary model's first), and ``zen-<cluster>``
        only in ``legacy_vm_regions`` (a MIG made before VMs were named after their MIG: terraform keeps its
        base). No two clusters share a base."""
        return tuple(self.mig_name(region, m) for m in self.provisioning) + (
            (f"zen-{self.name}",) if region in self.legacy_vm_regions else ())

    def model_of(self, vm: str, region: str) -> str | None:
        """The provisioning model of the pool whose MIG named ``vm`` in ``region``; None: not this cluster's.
        A legacy-named VM is the primary model's."""
        base, _, suffix = vm.rpartition("-")
        if _MIG_SUFFIX.fullmatch(suffix) is None:
            return None
        if region in self.legacy_vm_regions and base == f"zen-{self.name}":
            return self.provisioning[0]
        return next((m for m in self.provisioning if self.mig_name(region, m) == base), None)

    def pool_of(self, vm: str, region: str) -> str | None:
        """The pool key (zen.core.provisioning) of ``vm`` in ``region``; None: not this cluster's."""
        model = self.model_of(vm, region)
        return None if model is None else pool_key(region, model, self.provisioning[0])

    def has_instance(self, vm: str, region: str) -> bool:
        """Whether ``vm`` is named as an instance of this cluster's MIG in ``region``. It trusts that only
        the MIGs make VMs named so."""
        return self.model_of(vm, region) is not None
