"""Messages and records.

Every Pub/Sub payload is a versioned pydantic model validated once, at the edge: unknown fields refused (a newer agent's
report's, a newer Zen's STOP's ignored: docs/reference/messages.md), types strict, text that Postgres can store.

The job state machine: ``zen.core.job_states`` (re-exported here).
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from zen.core.arrays import ArraySpec
from zen.core.reports import AgentStatus as AgentStatus, ControlAction as ControlAction, VmState as VmState
from zen.core.checkpoints import CheckpointSpec, StartCheckpoint
from zen.core.dependencies import AfterFields
from zen.core.retries import AttemptBudget, OverLimit as OverLimit, RetryFields  # OverLimit: Heartbeat.over_limit's type
from zen.core.gang_records import GangNode, GangPlace
from zen.core.gcs import check_input_names, check_uri
from zen.core.images import check_image
from zen.core.job_states import TERMINAL as TERMINAL, TRANSITIONS as TRANSITIONS, JobStatus as JobStatus
from zen.core.job_states import can_transition as can_transition, illegal_step as illegal_step
from zen.core.lease import MAX_HEARTBEAT_TIMEOUT_S
from zen.core.notify import NotifyTargets
from zen.core.provisioning import Accepted
from zen.core.secrets import EnvName, Secrets, env_clash, reserved_names
from zen.core.timestamps import UtcTimestamp as UtcTimestamp
from zen.core.text import unstorable_place

MESSAGE_VERSION: Final = 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
JOB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")  # \Z: "$" allows a final "\n"
MAX_INPUTS = 16
MAX_NODES = 64  # a gang's VMs: its start goes out once per node, each node beats on its own
LOWEST_PRIORITY = -1000  # a job's least priority (asked with it, may_submit checks membership alone)


def _job_id(value: str) -> str:
    if not JOB_ID_PATTERN.match(value):
        raise ValueError(
            "job_id must be 1-128 characters of letters, digits, '.', '_', ':' or '-', "
            "starting with a letter or digit"
        )
    return value


JobId = Annotated[str, AfterValidator(_job_id)]
Label = Annotated[str, Field(min_length=1, max_length=63)]


class Message(BaseModel):
    """Base of every payload: strict, immutable, versioned."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    version: Literal[1] = MESSAGE_VERSION

    def to_bytes(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode()


class Received(Message):
    """A payload the functions receive, whose text may reach Postgres (Zen's own are built from these)."""

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        where = unstorable_place(data)  # refused here, naming the field, not in the driver later
        if where:
            raise ValueError(where)
        return data


GsUri = Annotated[str, Field(max_length=1100), AfterValidator(check_uri)]


class InputSpec(BaseModel):
    """One of a job's ``inputs``: an object or a prefix (``zen.core.gcs``), staged into ``ZEN_INPUT_DIR``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    uri: GsUri
    size_gb: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False, description="Its weight")


class JobRequest(Received, RetryFields, AfterFields):
    """Published by users on ``zen-job-submitted``."""

    job_id: JobId | None = Field(default=None, description="Idempotency key; defaults to the Pub/Sub message id")
    user_id: str = Field(min_length=1, max_length=128)
    cluster: str | None = None
    gpu_type: str | None = None
    gpu_count: int | None = Field(default=None, ge=1, le=16)
    gpu_types: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None, min_length=1, max_length=8, description="Acceptable GPU types, preferred first (zen.jobs.placement)")
    image: Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(check_image)] | None = Field(
        default=None, description="A container image reference (zen.core.images), never read as a docker option")
    command: list[Annotated[str, Field(max_length=16384)]] | None = Field(default=None, max_length=1024)
    env: dict[EnvName, str] = Field(default_factory=dict)
    secrets: Secrets | None = Field(default=None, description="Variable -> secret version, read by the agent")
    priority: int = Field(default=0, ge=LOWEST_PRIORITY, le=1000)
    regions: list[str] | None = Field(default=None, min_length=1, description="Allow-list of regions")
    max_runtime_s: int | None = Field(default=None, ge=1, le=INT32_MAX)
    max_attempts: int | None = Field(default=None, ge=1, le=INT32_MAX)
    labels: dict[Label, Annotated[str, Field(max_length=63)]] = Field(default_factory=dict)
    requires_tags: list[Annotated[str, Field(min_length=1, max_length=41)]] | None = Field(
        default=None, max_length=16, description="Run only on VMs of these execution groups (zen.jobs.placement)")
    queue: str | None = Field(default=None, min_length=1, max_length=41,
                              description="The queue whose quota admits it; default: the user's queue")
    inputs: list[InputSpec] | None = Field(default=None, min_length=1, max_length=MAX_INPUTS,
                                           description="Staged into ZEN_INPUT_DIR before the job")
    outputs: GsUri | None = Field(default=None, description="ZEN_OUTPUT_DIR is uploaded under it after the job")
    provisioning: Accepted | None = Field(
        default=None, description="spot, standard, flex-start or any (None: any) of its cluster's models")
    max_start_wait_s: int | None = Field(default=None, ge=0, le=INT32_MAX, description=(
        "Seconds it may wait for a start before a costlier model is used; None: its cluster's max_start_wait_s"))
    checkpoint: CheckpointSpec | None = Field(default=None, description="ZEN_CHECKPOINT_DIR saved, restored on reruns")
    array: ArraySpec | None = Field(default=None, description="N tasks from one submission (zen.core.arrays)")
    notify: NotifyTargets | None = Field(default=None, description=(
        "Where its end and preemptions are told (zen.core.notify): Slack, webhook (secret versions), email"))
    nodes: int = Field(default=1, ge=1, le=MAX_NODES, description=(
        "VMs of its cluster it runs on at once, in one region (a gang: zen.core.gang); 1: an ordinary job"))

    @field_validator("inputs")
    @classmethod
    def _distinct_inputs(cls, value: list[InputSpec] | None) -> list[InputSpec] | None:
        if value:
            check_input_names([spec.uri for spec in value])
        return value

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0].strip()):
            raise ValueError("command must be a non-empty list of strings whose first item is the program")
        return value

    @model_validator(mode="after")
    def _shape(self) -> "JobRequest":
        if self.image is None and self.command is None:
            raise ValueError("give an image, a command (a list of strings), or both")
        by_type = self.gpu_type is not None or self.gpu_types is not None
        if self.cluster is None and (not by_type or self.gpu_count is None):
            raise ValueError("give a cluster, or gpu_count with gpu_type (or gpu_types)")
        if self.cluster is not None and (by_type or self.gpu_count is not None):
            raise ValueError("give either a cluster or gpu_count with gpu_type (or gpu_types), not both")
        if self.gpu_type is not None and self.gpu_types is not None:
            raise ValueError("give gpu_type or gpu_types, not both")
        if clash := env_clash(self.env, self.secrets) or reserved_names(self.env, self.secrets):
            raise ValueError(clash)
        if problem := self.retry_problem() or self.after_problem(self.job_id):
            raise ValueError(problem)
        return self

    def to_bytes(self) -> bytes:  # without nodes 1: an ordinary job's message is what it was before gangs
        return self.model_dump_json(exclude_none=True, exclude={"nodes"} if self.nodes == 1 else None).encode()

    def canonical(self, job_id: str) -> dict[str, Any]:
        """The request as ``job_id``'s row keeps it (``Job.request``), its job_id filled in. ``nodes`` 1 is
        left out, so an ordinary job's request (and its ``request_hash``) is what it was before gangs."""
        canonical = self.model_dump(mode="json", exclude_none=True, exclude={"nodes"} if self.nodes == 1 else None)
        canonical["job_id"] = job_id
        return canonical


def request_fingerprint(canonical: dict[str, Any]) -> str:
    """``Job.request_hash`` of a canonical request (``JobRequest.canonical``): a redelivery, or the same
    request sent again, has the same; a reuse of the job_id by another request does not."""
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


class StopRequest(Received):
    """Published by users on ``zen-job-stop``."""

    job_id: JobId
    reason: str | None = Field(default=None, max_length=1024)


class Heartbeat(Received):
    """Published by agents on ``zen-heartbeats`` about one attempt of a job."""

    kind: Literal["job"] = "job"
    job_id: JobId
    attempt: int = Field(ge=1, le=INT32_MAX)
    vm: str = Field(min_length=1, max_length=128)
    region: str = Field(min_length=1, max_length=64)
    zone: str = Field(min_length=1, max_length=64)
    status: Annotated[AgentStatus, Strict(False)]
    seq: int = Field(ge=1, le=INT64_MAX, description="Increasing within the attempt; agents send epoch milliseconds")
    sent_at: UtcTimestamp
    exit_code: int | None = Field(default=None, ge=-INT32_MAX, le=INT32_MAX)
    message: str | None = Field(default=None, max_length=8192, description="e.g. the output tail")
    over_limit: OverLimit | None = Field(default=None, description="The limit the agent stopped the job at (zen.core.retries)")
    tags: list[Annotated[str, Field(max_length=41)]] | None = Field(
        default=None, max_length=64, description="The VM's execution groups (checked against a job's requires_tags)")
    ip: str | None = Field(default=None, max_length=64, description="The VM's internal address (zen.core.gang)")
    gives_way: bool | None = None  # CLAIMED by an agent that gives an outranked claim's start back (zen.jobs.claims)
    # The heartbeat_timeout_s its agent's fence is computed from (the configuration its VM booted with): Zen waits as
    # long for the attempt (zen.core.lease.attempt_deadlines). None: not said (an older agent): the configuration's.
    heartbeat_timeout_s: float | None = Field(default=None, gt=0, le=MAX_HEARTBEAT_TIMEOUT_S, allow_inf_nan=False)
    # The attempt's data (zen.agent.staging): inputs staged and outputs uploaded so far.
    staged_bytes: int | None = Field(default=None, ge=0, le=INT64_MAX)
    staged_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    uploaded_bytes: int | None = Field(default=None, ge=0, le=INT64_MAX)
    uploaded_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)


# The ``kind`` attribute of a start message offered to one VM on zen-vm-control (zen.core.routing), which
# tells the agent a start offer from an order (ControlMessage) on its control subscription.
START_OFFER = "start"


class StartMessage(Message):
    """Published by Zen on ``zen-job-start`` for agents of ``cluster``.

    Attributes (for subscription filters): ``cluster``, ``job_id``, ``attempt``, ``regions``
    (comma-separated, or ``*``), and one ``allow_<region with '-' as '_'>`` = ``"1"`` per region it
    reaches (``allow_any`` = ``"1"`` when that is every region of the cluster): the allowed regions, or
    while a data job's start is narrowed (``zen.core.routing``) the regions near its data; ``regions`` in the
    payload are always the allowed ones. While the start is offered to warm VMs instead (``zen.core.routing``),
    one copy per VM goes to ``zen-vm-control`` with attributes ``vm``, ``kind`` (``START_OFFER``),
    ``cluster``, ``job_id`` and ``attempt``.

    ``job_id`` and ``attempt`` are bounded as a ``Heartbeat``'s are: an agent refuses (acks, with the
    reason) a start no report of its could name, which it would otherwise give back forever.
    """

    job_id: JobId
    attempt: int = Field(ge=1, le=INT32_MAX)
    cluster: str
    user_id: str
    image: str | None = None
    command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] | None = None  # variable -> secret version the agent reads (zen.agent.secrets)
    regions: list[str]
    max_runtime_s: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    inputs: list[InputSpec] | None = None
    outputs: GsUri | None = None  # as the request's: a start that names no bucket is dropped at decode
    gpus: int | None = Field(default=None, ge=1, description="GPUs it holds on its VM; None: all of them")
    checkpoint: StartCheckpoint | None = None  # where its checkpoint lives (zen.core.checkpoints)
    nodes: int | None = Field(default=None, ge=2, description="A gang's nodes (zen.core.gang); None: one VM")
    assemble_s: int | None = Field(default=None, ge=1, description="A gang's node waits this long for the others")


class ControlMessage(Message):
    """Published by Zen on ``zen-vm-control`` with attribute ``vm``: one VM's orders."""

    vm: str
    job_id: str
    attempt: int
    action: Annotated[ControlAction, Strict(False)]
    reason: str | None = None
    gang: GangPlace | None = None  # a gang's CONFIRM: this node's rank and its peers (None: one VM)


class JobEvent(Message):
    """Published by Zen on ``zen-job-events``: every status change, rejection and ignored message."""

    type: Literal["job.status_changed", "job.rejected", "job.message_ignored", "job.admitted", "job.preempted"]
    job_id: str | None = None
    attempt: int | None = None
    from_status: Annotated[JobStatus, Strict(False)] | None = None
    to_status: Annotated[JobStatus, Strict(False)] | None = None
    reason: str
    at: UtcTimestamp
    cluster: str | None = None
    region: str | None = None
    vm: str | None = None
    exit_code: int | None = None
    queue: str | None = None


class Job(AttemptBudget):
    """A row of the jobs table (its ``budget``: ``zen.core.retries.AttemptBudget``)."""

    model_config = ConfigDict(frozen=True)
    job_id: str
    status: JobStatus
    attempt: int
    max_attempts: int
    cluster: str
    user_id: str
    priority: int
    regions: list[str]
    request: dict[str, Any]
    request_hash: str
    max_runtime_s: int | None
    region: str | None
    zone: str | None
    vm: str | None
    last_seq: int
    last_heartbeat_at: datetime | None
    submitted_at: datetime
    queued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None
    message: str | None
    start_published_at: datetime | None = None
    updated_at: datetime
    queue: str | None = None  # the queue whose quota it holds while admitted (None: no queues)
    gpus: int = 0  # GPUs it holds while admitted (ClusterConfig.gpus_held; 0: an old row, the VM's GPUs)
    preempted_by: str | None = None  # set while its VM stops it for a preemption (see zen.jobs.queueing)
    stop_reason: str | None = None  # the reason of the user's stop (zen.core.lifecycle.decide_stop); None: none
    preemptions: int = 0
    # Where its start message reaches while narrowed (zen.core.routing), and when the tick widens it (None: everywhere).
    start_regions: list[str] | None = None
    widen_at: datetime | None = None
    # The warm VMs its start is offered to meanwhile, on their control subscriptions (None: no offer).
    start_vms: list[str] | None = None
    # Why it may not be admitted yet, while PENDING (an array's max_parallel, zen.core.arrays; a retry's backoff,
    # zen.core.retries, until hold_until); None: it may.
    hold: str | None = None
    hold_until: datetime | None = None
    retries: int = 0  # retries after failed exits so far (zen.core.retries)
    nodes: int = 1  # VMs it runs on at once (its request's nodes): > 1, a gang (zen.core.gang)
    gang: list[GangNode] | None = None  # a gang's nodes of the current attempt, rank order (None: none claimed)
    # VMs that gave the attempt up before it ran there (a gang's node leaving its assembly, a claim whose VM went away)
    left_vms: dict[str, int] | None = None  # -> the seq of the report that said so: earlier ones are late copies
    heard_at: datetime | None = None  # STOPPING: this attempt's VM's last report, before the stop or since (a next attempt clears it)
    # What the current attempt's claim said of its fence (Heartbeat.heartbeat_timeout_s); a gang's: its nodes' longest
    fence_timeout_s: float | None = None  # (zen.core.gang_records.fence_timeout_s), from its completion

    def public_view(self) -> dict[str, Any]:
        """The JSON a user sees (``zen jobs get --json``); max_start_wait_s None: its cluster's default."""
        view = {key: _plain(getattr(self, key)) for key in _PUBLIC}
        return {**view, "provisioning": self.request.get("provisioning", "any"),
                "max_start_wait_s": self.request.get("max_start_wait_s")}


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value.value if isinstance(value, enum.Enum) else value


_PUBLIC = ("job_id", "status", "attempt", "max_attempts", "cluster", "queue", "user_id", "priority", "regions", "region",
           "zone", "vm", "submitted_at", "started_at", "finished_at", "exit_code", "message", "hold", "retries", "stop_reason")
