"""Configuration: clusters, regions, limits, topic names and deadlines.

Read from the YAML file named by ``ZEN_CONFIG``; when unset, the documented default shipped with
the package (``zen/core/default_config.yaml``) is used. Validated once with pydantic; errors name the
field and the problem.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from zen.core.errors import ConfigError, describe_validation_error
from zen.core.lease import Deadlines as Deadlines  # the `deadlines:` section, exported here with the rest

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default_config.yaml")
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}\Z")  # \Z: "$" allows a final "\n"
_MIG_SUFFIX = re.compile(r"[a-z0-9]{4}")  # GCE names a MIG's instances <base>-<4 of these>
TAG_PATTERN = _NAME  # a tag (execution group): what a job may require, and all an agent reports (zen.agent.identity)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def describe_pull_limits(max_jobs: int | None, max_gpu_hours: float | None) -> str:
    """``2 jobs / 40 GPU-hours in 24 h``: a VM's pull limits as decisions and logs quote them."""
    parts = [f"{max_jobs} jobs" if max_jobs else "", f"{max_gpu_hours:g} GPU-hours" if max_gpu_hours else ""]
    return " / ".join(p for p in parts if p) + " in 24 h" if any(parts) else "no limit"


_RUN_AS = re.compile(r"^(image|[0-9]{1,10}:[0-9]{1,10})\Z")


class ContainerPolicy(_Strict):
    """How a cluster's agents confine job containers (zen.agent.container): by default a job runs as
    nobody, with no capabilities, a read-only root filesystem, its slot's memory, CPU and task limits,
    on a network of its own."""

    run_as: str = Field(default="65534:65534", description=(
        "uid:gid a job's container runs as; 'image': the image's own USER (root for most: the opt-out)"))
    network: Literal["job", "none"] = Field(default="job", description=(
        "'job': a bridge network per slot (internet, no neighbours); 'none': no network at all"))
    read_only_root: bool = Field(default=True, description=(
        "A read-only root filesystem (/tmp and ZEN_OUTPUT_DIR writable); false for a GPU runtime whose hooks "
        "write into it"))

    @field_validator("run_as")
    @classmethod
    def _run_as_shape(cls, value: str) -> str:
        if not _RUN_AS.match(value):
            raise ValueError("run_as is uid:gid in numbers (e.g. 65534:65534), or 'image'")
        return value


class ClusterConfig(_Strict):
    """One machine shape, e.g. ``4xa100-40gb``: 4 A100 40GB per VM."""

    name: str
    gpu_type: str = Field(description="Accelerator type, e.g. nvidia-tesla-a100")
    gpu_count: int = Field(ge=1, le=16, description="GPUs per VM")
    machine_type: str = "a2-highgpu-1g"
    regions: list[str] = Field(min_length=1, description="Allowed regions, most preferred first")
    max_vms_per_region: int = Field(ge=0, description="Upper bound on each regional MIG")
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

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not _NAME.match(value):
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
        bad = sorted(t for t in named if not _NAME.match(t))
        if bad:
            raise ValueError(f"tags are lowercase letters, digits and '-': {', '.join(bad)}")
        too_long = [r for r in self.regions if len(self.mig_name(r)) > 58]
        if too_long:  # GCE appends "-xxxx" to a MIG's base instance name, 58 characters at most
            raise ValueError(f"the MIG name {self.mig_name(too_long[0])!r} is over 58 characters (its VMs are "
                             "named after it): use a shorter cluster name")
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

    def mig_name(self, region: str) -> str:
        """Name of the regional MIG terraform creates for this cluster."""
        return f"zen-{self.name}-{region}"

    def vm_bases(self, region: str) -> tuple[str, ...]:
        """What GCE names this cluster's VMs in ``region`` after (``<base>-<4 of a-z0-9>``): the MIG's name
        (terraform's base instance name), and ``zen-<cluster>`` only in ``legacy_vm_regions`` (a MIG made
        before VMs were named after their MIG: terraform keeps its base). No two clusters share a base."""
        return (self.mig_name(region),) + ((f"zen-{self.name}",) if region in self.legacy_vm_regions else ())

    def has_instance(self, vm: str, region: str) -> bool:
        """Whether ``vm`` is named as an instance of this cluster's MIG in ``region``. It trusts that only
        the MIGs make VMs named so."""
        base, _, suffix = vm.rpartition("-")
        return base in self.vm_bases(region) and _MIG_SUFFIX.fullmatch(suffix) is not None


class Topics(_Strict):
    job_submitted: str = "zen-job-submitted"
    job_stop: str = "zen-job-stop"
    heartbeats: str = "zen-heartbeats"
    scale_tick: str = "zen-scale-tick"
    job_start: str = "zen-job-start"
    vm_control: str = "zen-vm-control"
    job_events: str = "zen-job-events"


class Subscriptions(_Strict):
    """Subscription name prefixes; see ``ZenConfig.job_start_subscription`` and friends."""

    job_start_prefix: str = "zen-job-start-"
    vm_control_prefix: str = "zen-vm-control-"


class Scaling(_Strict):
    """The planner's knobs (see zen/scaling/planner.py)."""

    stockout_block_s: float = Field(default=180, gt=0, description="First block of a stocked-out region")
    max_stockout_block_s: float = Field(default=900, gt=0, description="The block doubles per strike up to this")
    spill_after_s: float = Field(default=240, gt=0, description="A VM booting this long: its demand spills over")
    boot_estimate_s: float = Field(default=120, gt=0, description="Typical boot until a region's own is learned")
    idle_grace_s: float = Field(default=30, ge=0, description="Idle VMs beyond those worth keeping go after this")
    hedge_risk: float = Field(default=0.0, ge=0, description="Hedge a cold boot when its region's risk is at least this")
    keep_factor: float = Field(default=1.0, ge=0, description="A cold start's price in boots (ski rental)")
    stockout_memory_s: float = Field(default=3600, gt=0, description="How long a stockout weighs on a region's rank")
    preference_s: float = Field(default=15, ge=0, description="Seconds of boot one step of preference is worth")


class Attempts(_Strict):
    default_max_attempts: int = Field(default=3, ge=1)
    max_max_attempts: int = Field(default=10, ge=1, description="Cap on a request's max_attempts")

    @model_validator(mode="after")
    def _order(self) -> "Attempts":
        if self.default_max_attempts > self.max_max_attempts:
            raise ValueError("default_max_attempts is above max_max_attempts")
        return self


class Limits(_Strict):
    max_message_bytes: int = Field(default=64 * 1024, gt=0, description="Larger payloads are rejected")
    max_runtime_s: int = Field(default=7 * 24 * 3600, gt=0,
                               description="Cap on a job's max_runtime_s, and its value when it gives none")


_Gpus = Annotated[int, Field(ge=0, strict=True)]


class QueueConfig(_Strict):
    """A Kueue-style queue: the GPUs its jobs may hold at once, per cluster (see ``zen.jobs.queueing``)."""

    name: str
    cohort: str | None = Field(default=None, description="Queues of a cohort lend unused quota to each other")
    quota: dict[str, _Gpus] = Field(min_length=1, description="Cluster -> GPUs admitted at once (nominal quota)")
    borrowing_limit: dict[str, _Gpus] | None = Field(
        default=None, description="Cluster -> most GPUs it may borrow from its cohort (unset: no limit)")
    users: list[str] = Field(default_factory=list, description="Users whose default queue this is")
    preemption: Literal["never", "lower-priority", "reclaim-borrowed"] = Field(
        default="never", description="What a job within its nominal quota may preempt (zen.jobs.queueing)")

    @field_validator("name", "cohort")
    @classmethod
    def _name_shape(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError("queue and cohort names are lowercase letters, digits and '-', e.g. research")
        return value

    @model_validator(mode="after")
    def _borrowing(self) -> "QueueConfig":
        extra = sorted(set(self.borrowing_limit or {}) - set(self.quota))
        if extra:
            raise ValueError(f"borrowing_limit names clusters without a quota: {', '.join(extra)}")
        if self.borrowing_limit and self.cohort is None:
            raise ValueError("borrowing_limit needs a cohort to borrow from")
        return self

    def may_borrow(self, cluster: str) -> int | None:
        """GPUs this queue may borrow for ``cluster``: 0 outside a cohort, None for no limit."""
        if self.cohort is None:
            return 0
        return (self.borrowing_limit or {}).get(cluster)

    def limit(self, cluster: str) -> float:
        """GPUs of ``cluster`` this queue may hold at most: its nominal quota plus what it may borrow."""
        borrow = self.may_borrow(cluster)
        return self.quota[cluster] + (math.inf if borrow is None else borrow)


class EgressRates(_Strict):
    """USD per GB of job input read from another place (list-price assumptions; set your own)."""

    same_region: float = Field(default=0.0, ge=0)
    same_multi_region: float = Field(default=0.01, ge=0)
    other: float = Field(default=0.08, ge=0)


class DataConfig(_Strict):
    bucket_locations: dict[str, str] = Field(
        default_factory=dict, description="Bucket -> location (region or multi-region); others are looked up")
    egress_usd_per_gb: EgressRates = EgressRates()
    route_min_gb: float = Field(default=10, ge=0, description=(
        "Located inputs weighing at least this (size_gb, 1 when not given) route a start to their regions first"))


_Usd = Annotated[float, Field(ge=0)]

# Approximate on-demand list prices in us-central1 (USD per VM-hour, GPUs included; 2024 price list):
# no sustained- or committed-use discount, not Spot, no disk or network. Other regions list up to
# ~15% higher. Estimates only: set your own (``pricing.usd_per_vm_hour`` replaces this table).
LIST_PRICE_USD_PER_VM_HOUR = {
    "g2-standard-8": 0.85,     # 1 x L4
    "a2-highgpu-1g": 3.67,     # 1 x A100 40GB
    "a2-highgpu-2g": 7.35,
    "a2-highgpu-4g": 14.69,
    "a2-highgpu-8g": 29.39,
}


class Pricing(_Strict):
    """What ``zen usage`` prices VM-hours at: machine type -> USD per VM-hour (GPUs included). A
    machine type not listed is reported as unpriced rather than guessed."""

    usd_per_vm_hour: dict[str, _Usd] = Field(default_factory=lambda: dict(LIST_PRICE_USD_PER_VM_HOUR))


def cohort_of(queues: list[QueueConfig], queue: QueueConfig, cluster: str | None = None) -> list[QueueConfig]:
    """The queues that share quota with ``queue`` (itself included); with ``cluster``, only those with a
    quota for it."""
    members = [queue] if queue.cohort is None else [q for q in queues if q.cohort == queue.cohort]
    return [q for q in members if cluster is None or cluster in q.quota]


class Queueing(_Strict):
    usage_half_life_s: float = Field(default=3600, gt=0, description="Fair sharing: half-life of past usage")


class ZenConfig(_Strict):
    project: str = "zen-local"
    clusters: list[ClusterConfig] = Field(min_length=1)
    queues: list[QueueConfig] = Field(default_factory=list, description="No queues: every job is admitted")
    queueing: Queueing = Queueing()
    data: DataConfig = DataConfig()
    pricing: Pricing = Pricing()
    topics: Topics = Topics()
    subscriptions: Subscriptions = Subscriptions()
    deadlines: Deadlines = Deadlines()
    scaling: Scaling = Scaling()
    attempts: Attempts = Attempts()
    limits: Limits = Limits()

    @field_validator("clusters")
    @classmethod
    def _unique_clusters(cls, value: list[ClusterConfig]) -> list[ClusterConfig]:
        names = [c.name for c in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"cluster names must be unique; repeated: {', '.join(duplicates)}")
        bases = {c.name: {base for r in c.regions for base in c.vm_bases(r)} for c in value}
        shared = next(((a, b) for a in names for b in names if a < b and bases[a] & bases[b]), None)
        if shared:
            a, b = shared
            raise ValueError(f"clusters {a} and {b} would name VMs alike ({min(bases[a] & bases[b])}-xxxx): "
                             "a VM's name tells Zen its cluster (ClusterConfig.has_instance); rename one")
        return value

    @model_validator(mode="after")
    def _queues(self) -> "ZenConfig":
        names = [q.name for q in self.queues]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"queue names must be unique; repeated: {', '.join(repeated)}")
        known = {c.name for c in self.clusters}
        owners: dict[str, str] = {}
        for queue in self.queues:
            unknown = sorted(set(queue.quota) - known)
            if unknown:
                raise ValueError(f"queue {queue.name}: quota names unknown clusters: {', '.join(unknown)}")
            for user in queue.users:
                if user in owners:
                    raise ValueError(f"user {user} is in the users of queues {owners[user]} and {queue.name}")
                owners[user] = queue.name
        return self

    def cluster(self, name: str) -> ClusterConfig | None:
        return next((c for c in self.clusters if c.name == name), None)

    def queue(self, name: str) -> QueueConfig | None:
        return next((q for q in self.queues if q.name == name), None)

    def default_queue(self, user: str) -> QueueConfig | None:
        """The user's queue (``users:``), else a queue named ``default``, else None."""
        return next((q for q in self.queues if user in q.users), None) or self.queue("default")

    def cohort_of(self, queue: QueueConfig, cluster: str | None = None) -> list[QueueConfig]:
        return cohort_of(self.queues, queue, cluster)

    # Subscriptions agents pull from. Every (cluster, region) has its own start subscription whose
    # filter lets through exactly the start messages of that cluster allowed in that region (see the
    # attributes of ``StartMessage``), so an agent never even sees a job it may not run.
    def job_start_subscription(self, cluster: str, region: str) -> str:
        return f"{self.subscriptions.job_start_prefix}{cluster}-{region}"

    @staticmethod
    def job_start_filter(cluster: str, region: str) -> str:
        region_key = "allow_" + region.replace("-", "_")
        return f'attributes.cluster = "{cluster}" AND (attributes:allow_any OR attributes:{region_key})'

    def vm_control_subscription(self, vm: str) -> str:
        return f"{self.subscriptions.vm_control_prefix}{vm}"

    @staticmethod
    def vm_control_filter(vm: str) -> str:
        return f'attributes.vm = "{vm}"'

    def smallest_fitting_cluster(self, gpu_type: str, gpu_count: int) -> ClusterConfig | None:
        """The cluster of that GPU type with the fewest GPUs per VM that is still >= gpu_count.

        Ties keep the order of the configuration file.
        """
        fitting = [c for c in self.clusters if c.gpu_type == gpu_type and c.gpu_count >= gpu_count]
        return min(fitting, key=lambda c: c.gpu_count, default=None)


def load_config(path: str | os.PathLike[str] | None = None) -> ZenConfig:
    """Load and validate the configuration; ``path`` defaults to ``$ZEN_CONFIG``, then the default."""
    path = Path(path or os.environ.get("ZEN_CONFIG") or DEFAULT_CONFIG_PATH)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist (set ZEN_CONFIG)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a YAML mapping at the top level")
    try:
        return ZenConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_validation_error(exc, top='(top level)')}") from None
