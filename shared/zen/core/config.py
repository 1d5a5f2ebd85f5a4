"""Configuration: clusters, regions, limits, topic names and deadlines.

Read from the YAML file named by ``ZEN_CONFIG``; when unset, the documented default shipped with
the package (``zen/core/default_config.yaml``) is used. Validated once with pydantic; errors name the
field and the problem.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from zen.core.checkpoints import CheckpointConfig
from zen.core.clearance import ClearanceBinding, check_bindings
from zen.core.documents import DuplicateKey, load_yaml
from zen.core.errors import ConfigError, describe_validation_error
from zen.core.gang_records import GangConfig
from zen.core.lease import Deadlines as Deadlines  # the `deadlines:` section, exported here with the rest
from zen.core.limits import Attempts as Attempts, Limits as Limits  # the `attempts:` and `limits:` sections
from zen.core.cluster_config import NAME as _NAME, ClusterConfig as ClusterConfig, ContainerPolicy as ContainerPolicy
from zen.core.cluster_config import Number, Strict as _Strict, describe_pull_limits as describe_pull_limits
from zen.core.prices import Pricing as Pricing  # the `pricing:` section
from zen.core.prices import pricing_problem
from zen.core.shapes import machine_problem
from zen.core.storage_locations import location_problem
from zen.core.principals import matches, pattern_error
from zen.core.notify import NotificationsConfig, NotifyTargets, foreign_secret, refused_target
from zen.core.secrets import SecretPattern

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default_config.yaml")
TAG_PATTERN = _NAME  # a tag (execution group): what a job may require, and all an agent reports (zen.agent.identity)


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
    cost_slack_s: float = Field(default=120, ge=0, description=(
        "Priced pools: one expected this much slower than the fastest may still win on price"))
    hedge_price_ratio: float = Field(default=1.25, ge=1, description=(
        "Priced pools: a hedge goes only to a pool at most this many times its first choice's price"))
    flex_start_estimate_s: float = Field(default=900, gt=0, description=(
        "A flex-start pool's asked-to-usable time (its queue and boot; not learned: docs/explanations/scaling.md)"))
    spare_boots: bool = Field(default=True, description=(
        "Priced pools: a one-VM job races a second boot in its pool and starts on the first up"))


_Gpus = Annotated[Number[int], Field(ge=0)]  # 16.0 is 16, as every integer field reads it; no bool, no text


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
    submitters: list[str] | None = Field(default=None, description=(
        "Who may submit to it (principal patterns: zen.core.principals); unset: anyone. Its users and admins may too"))
    admins: list[str] = Field(default_factory=list, description="Who may stop any of its jobs, and submit to it")
    max_priority: int | None = Field(default=None, ge=-1000, le=1000,
                                     description="The highest priority its jobs may ask for (unset: 1000)")
    secrets: list[SecretPattern] = Field(
        default_factory=list, description="Secret versions its jobs may name, * wildcards (zen.core.secrets); none by default")
    notify: NotifyTargets = Field(default_factory=list, description=(
        "Where every job of the queue's end and preemptions are told, besides its own notify (zen.core.notify)"))

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
    """USD per GB of job input read from another place (``zen.core.locality.distance``; set your own). The defaults
    are Cloud Storage's list prices as its pricing page (https://cloud.google.com/storage/pricing, network usage)
    states them for data moving within Google Cloud: no charge within a region, $0.01/GB between different locations
    of one continent (``us-east1`` to ``northamerica-northeast1``, a ``US`` bucket read in ``us-central1``), and
    $0.08/GB between continents neither of which is Oceania (one that is: $0.15/GB, not modelled apart: set
    ``other`` to it for ``australia-*``). ``same_continent`` unset (configurations written before it) is
    ``same_multi_region``'s rate."""

    same_region: float = Field(default=0.0, ge=0)
    same_multi_region: float = Field(default=0.01, ge=0)
    same_continent: float | None = Field(default=None, ge=0)
    other: float = Field(default=0.08, ge=0)

    @property
    def continental(self) -> float:
        """A read from another region of the bucket's continent, outside its multi-region."""
        return self.same_multi_region if self.same_continent is None else self.same_continent


class DataConfig(_Strict):
    bucket_locations: dict[str, str] = Field(
        default_factory=dict, description="Bucket -> location (region or multi-region); others are looked up")
    egress_usd_per_gb: EgressRates = EgressRates()
    route_min_gb: float = Field(default=10, ge=0, description=(
        "Located inputs weighing at least this (size_gb, 1 when not given) route a start to their regions first"))

    @field_validator("bucket_locations")
    @classmethod
    def _locations(cls, value: dict[str, str]) -> dict[str, str]:
        for bucket, location in value.items():
            if problem := location_problem(location):
                raise ValueError(f"{bucket}: {problem}")
        return value


def cohort_of(queues: list[QueueConfig], queue: QueueConfig, cluster: str | None = None) -> list[QueueConfig]:
    """The queues that share quota with ``queue`` (itself included); with ``cluster``, only those with a
    quota for it."""
    members = [queue] if queue.cohort is None else [q for q in queues if q.cohort == queue.cohort]
    return [q for q in members if cluster is None or cluster in q.quota]


# The OAuth clients whose user ID tokens Zen accepts by default: gcloud's own (`gcloud auth
# print-identity-token`) and its application-default login's (`gcloud auth application-default login`,
# which `zen` reads through google-auth). A user account cannot ask Google for a token with an audience
# of its own choosing; service accounts ask for ``auth.audience``.
GCLOUD_CLIENT_IDS = ("32555940559.apps.googleusercontent.com",
                     "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com")


class AuthConfig(_Strict):
    """Who a submission or a stop comes from, and who may do what (zen.core.principals). Whether messages
    must carry their sender's proof is the functions' ``ZEN_AUTH`` (zen.adapters.submitters)."""

    audience: str | None = Field(default=None, description=(
        "The audience a service account asks its ID token for (default zen:<project>)"))
    client_ids: list[str] = Field(default_factory=lambda: list(GCLOUD_CLIENT_IDS), description=(
        "OAuth client ids whose users' ID tokens are accepted (default: gcloud's, and its application-default login's)"))
    admins: list[str] = Field(default_factory=list, description="Who may stop any job and submit to any queue")
    groups: dict[str, list[str]] = Field(default_factory=dict, description="Group name -> its members' patterns")

    @model_validator(mode="after")
    def _patterns(self) -> "AuthConfig":
        for name, members in self.groups.items():
            if not _NAME.match(name):
                raise ValueError(f"auth.groups: {name!r}: group names are lowercase letters, digits and '-'")
            for member in members:
                if member.startswith("group:"):
                    raise ValueError(f"auth.groups.{name}: {member!r}: a group lists principals, not groups")
                if why := pattern_error(member, self.groups):
                    raise ValueError(f"auth.groups.{name}: {why}")
        for pattern in self.admins:
            if why := pattern_error(pattern, self.groups):
                raise ValueError(f"auth.admins: {why}")
        return self

    def audience_of(self, project: str) -> str:
        return self.audience or f"zen:{project}"

    def admin(self, principal: str) -> str | None:
        """The ``auth.admins`` pattern that makes ``principal`` an administrator of every queue, or None."""
        return matches(principal, self.admins, self.groups)


class Queueing(_Strict):
    usage_half_life_s: float = Field(default=3600, gt=0, description="Fair sharing: half-life of past usage")


class ZenConfig(_Strict):
    project: str = "zen-local"
    clusters: list[ClusterConfig] = Field(min_length=1)
    queues: list[QueueConfig] = Field(default_factory=list, description="No queues: every job is admitted")
    secrets: list[SecretPattern] = Field(
        default_factory=list, description="Without queues: the secret versions jobs may name (zen.core.secrets)")
    queueing: Queueing = Queueing()
    data: DataConfig = DataConfig()
    pricing: Pricing = Pricing()
    topics: Topics = Topics()
    subscriptions: Subscriptions = Subscriptions()
    deadlines: Deadlines = Deadlines()
    scaling: Scaling = Scaling()
    attempts: Attempts = Attempts()
    limits: Limits = Limits()
    checkpoints: CheckpointConfig = CheckpointConfig()
    notifications: NotificationsConfig = NotificationsConfig()
    gangs: GangConfig = GangConfig()  # multi-node jobs (zen.core.gang)
    auth: AuthConfig = AuthConfig()
    # Data only some execution groups may read (zen.core.clearance); top level, not per cluster: a tag may
    # span clusters, and a binding must hold for every cluster, including those that never heard of it.
    data_clearance: list[ClearanceBinding] = Field(default_factory=list, description="Prefix -> tags to read it")

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
            for user in (u.casefold() for u in queue.users):
                if user in owners:
                    raise ValueError(f"user {user} is in the users of queues {owners[user]} and {queue.name}")
                owners[user] = queue.name
            for field, patterns in (("submitters", queue.submitters or []), ("admins", queue.admins)):
                for pattern in patterns:
                    if why := pattern_error(pattern, self.auth.groups):
                        raise ValueError(f"queue {queue.name}: {field}: {why}")
            for index, target in enumerate(queue.notify):  # whose project: for_project (the file's may be a stand-in)
                if why := refused_target(self.notifications, target, f"notify.{index}"):
                    raise ValueError(f"queue {queue.name}: {why}")
        return self

    def for_project(self, project: str) -> "ZenConfig":
        """This configuration as Zen runs in ``project`` (``ZEN_PROJECT``, which terraform sets; the file's ``project``
        is a fallback, ``zen-local`` as shipped): ``ConfigError`` naming each secret the notifier reads (a queue's
        notify target's, the email API's key) that is another project's, where terraform grants it none (it loaded,
        and every notice was refused on its read)."""
        email = self.notifications.email
        problems = [f"queue {queue.name}: notify.{index}.{target.kind}: {why}" for queue in self.queues
                    for index, target in enumerate(queue.notify)
                    if target.secret is not None and (why := foreign_secret(target.secret, project))]
        if email is not None and (why := foreign_secret(email.api_key_secret, project, "key")):
            problems.append(f"notifications.email.api_key_secret: {why}")
        if problems:
            raise ConfigError("; ".join(problems))
        return self if project == self.project else self.model_copy(update={"project": project})

    @model_validator(mode="after")
    def _clusters_fit(self) -> "ZenConfig":
        """Machine types that hold their clusters' GPUs (a simulated cluster is not held to it), and prices
        that fit the clusters."""
        for index, cluster in enumerate(self.clusters):
            if why := machine_problem(cluster.machine_type, cluster.gpu_type, cluster.gpu_count):
                raise ValueError(f"clusters.{index} ({cluster.name}): {why}")
        if why := pricing_problem(self.pricing, self.clusters):
            raise ValueError(why)
        return self

    @model_validator(mode="after")
    def _data_clearance(self) -> "ZenConfig":
        check_bindings(self.data_clearance, self.clusters)
        for number, binding in enumerate(self.data_clearance):
            for pattern in binding.readers or ():
                if why := pattern_error(pattern, self.auth.groups):
                    raise ValueError(f"data_clearance[{number}] ({binding.prefix}): readers: {why}")
        return self

    def cluster(self, name: str) -> ClusterConfig | None:
        return next((c for c in self.clusters if c.name == name), None)

    def queue(self, name: str) -> QueueConfig | None:
        return next((q for q in self.queues if q.name == name), None)

    def default_queue(self, user: str) -> QueueConfig | None:
        """The user's queue (``users:``), else a queue named ``default``, else None."""
        user = user.casefold()  # e-mail addresses, compared as the authorization checks compare them
        return next((q for q in self.queues if user in {u.casefold() for u in q.users}), None) or self.queue("default")

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
    named = None if path else os.environ.get("ZEN_CONFIG")
    fix = "check ZEN_CONFIG, which names it" if named else "check its name" if path else "set ZEN_CONFIG"
    path = Path(path or named or DEFAULT_CONFIG_PATH)
    try:
        raw = load_yaml(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist ({fix})") from None
    except (OSError, UnicodeDecodeError) as exc:  # a directory, no read permission, not UTF-8
        raise ConfigError(f"configuration file {path} cannot be read ({fix}): {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    except DuplicateKey as exc:
        raise ConfigError(f"{path} {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a YAML mapping at the top level")
    try:
        config = ZenConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_validation_error(exc, top='(top level)', model=ZenConfig)}") from None
    if os.environ.get("ZEN_PRICES", "catalog").lower() == "snapshot":  # a deployment's catalog: false, after the
        # checks (a pool the snapshot lacks stays unpriced there, as with the catalog down, not refused)
        config = config.model_copy(update={"pricing": config.pricing.model_copy(update={"catalog": False})})
    return config
