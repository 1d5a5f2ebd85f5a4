"""The VM heartbeat: what an agent says about its VM on ``zen-heartbeats`` (its own module to keep
``zen.core.models`` short; the job heartbeat is ``zen.core.models.Heartbeat``), and the bound on any heartbeat's
``seq`` (:func:`check_seq`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

from zen.core.errors import Rejected
from zen.core.text import escape_unstorable, unstorable_place
from zen.core.models import INT32_MAX, INT64_MAX, GsUri, Heartbeat, JobId, Received, UtcTimestamp, VmState


class HeldAttempt(BaseModel):
    """One attempt a VM heartbeat names: one it holds (``jobs``) or one whose claim it gave back
    (``given_back``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    job_id: JobId
    attempt: int = Field(ge=1, le=INT32_MAX)


class VmHeartbeat(Received):
    """Published by agents on ``zen-heartbeats`` about the VM itself.

    ``job_id`` / ``attempt`` name the attempt it holds (the first, when it holds several); ``jobs``,
    sent only by a VM that may run several at once (``max_jobs_per_vm`` > 1), names every one of
    them, so a message from a VM that runs one job at a time is what it always was.

    ``given_back`` names the attempts whose start the VM dropped, because no answer to its CLAIMEDs
    came (given back) or because it was told RELEASE (a later try of the claim, sent before the answer
    came, may still win once the attempt is requeued), and that it never ran (most recent first). The
    list is read after the heartbeat's ``seq`` is drawn from the counter the VM's job reports share,
    and a claim the VM makes of such an attempt again takes it off the list before its CLAIMED draws a
    ``seq``: so if the database still shows
    the attempt held by the VM with no report of it later than this ``seq``, the VM does not run it
    and will not without a new claim, and Zen requeues it (``zen.core.lifecycle.decide_given_back``).
    Older agents do not send it, and nothing changes for them."""

    kind: Literal["vm"]
    vm: str = Field(min_length=1, max_length=128)
    cluster: str = Field(min_length=1, max_length=64)
    region: str = Field(min_length=1, max_length=64)  # and one its cluster uses (JobService._vm_heartbeat)
    zone: str = Field(min_length=1, max_length=64)
    state: Annotated[VmState, Strict(False)]
    seq: int = Field(ge=1, le=INT64_MAX, description="Increasing per VM; agents send epoch milliseconds")
    sent_at: UtcTimestamp
    job_id: JobId | None = None
    attempt: int | None = Field(default=None, ge=1, le=INT32_MAX)
    jobs: list[HeldAttempt] | None = Field(default=None, max_length=16, description="Every attempt it holds")
    given_back: list[HeldAttempt] | None = Field(default=None, max_length=16,
                                                 description="Attempts whose start it dropped (unanswered or released)")
    # Its warm cache (zen.agent.cache): job inputs whose every object it holds, images it ran; recent first.
    cached_inputs: list[GsUri] | None = Field(default=None, max_length=16)
    images: list[Annotated[str, Field(min_length=1, max_length=1024)]] | None = Field(default=None, max_length=16)


class VmUp(Received):
    """A VM's first word on ``zen-heartbeats``: its guest is up, its agent not yet. The instance template's
    startup script sends it as its first act, before it installs or starts the agent, with the VM's
    identity token for ``<audience>:up`` (``zen.adapters.vm_proof.ProofChecker.check_up``). It changes
    no row; while the VM's cluster has boots racing (``Zen.on_heartbeat``) it makes a scaling pass run,
    which sees the VM RUNNING in its MIG and deletes the boots it beat before they bill, a guest boot
    earlier than the agent's first heartbeat would. Why: docs/explanations/scaling.md, "Ending the
    boots that lost"."""

    kind: Literal["up"]
    vm: str = Field(min_length=1, max_length=128)
    cluster: str = Field(min_length=1, max_length=64)
    region: str = Field(min_length=1, max_length=64)
    zone: str = Field(min_length=1, max_length=64)
    sent_at: UtcTimestamp


class PathProbe(Received):
    """The scale tick's probe of the heartbeat path (``zen.jobs.probes``): published on ``zen-heartbeats`` by the
    tick, heard by the heartbeat function like any report. No VM's: it carries no token, and proves nothing but
    that a message the tick published came through, and when."""

    kind: Literal["probe"]
    nonce: str = Field(pattern=r"^[0-9a-f]{16,64}$")


def model_of(data: Any) -> type[Heartbeat | VmHeartbeat | VmUp | PathProbe]:
    """What a message on ``zen-heartbeats`` is, by its ``kind`` (none: a job's report when it names a job, else a VM
    heartbeat; anything unreadable is read as a job's report, which refuses it)."""
    kind = data.get("kind", "job" if "job_id" in data else "vm") if isinstance(data, dict) else "job"
    return VmHeartbeat if kind == "vm" else VmUp if kind == "up" else PathProbe if kind == "probe" else Heartbeat


AGENT_REPORTS: tuple[type[Received], ...] = (Heartbeat, VmHeartbeat, VmUp)  # what agents send (PathProbe: the tick's)


class NewerFields:
    """Top-level fields of an agent's report that this release does not know: a newer agent's (a VM keeps the
    agent it booted with while the functions are rolled back), dropped so the rest is read by the model's own
    rules. Refused whole, every report of such an agent's job was dropped: the job, running, was swept as
    silent and run again. Each model's set of such fields is told once (``first``) per instance."""

    def __init__(self) -> None:
        self._told: set[tuple[str, tuple[str, ...]]] = set()

    def known(self, data: Any, model: type[BaseModel]) -> tuple[Any, tuple[str, ...] | None]:
        """``data`` without the fields ``model`` does not know, and those fields' names the first time this
        instance drops that set for that model (None: nothing dropped, or dropped before). Nested objects,
        and messages that are not agents' reports, keep their own rules: an unknown field there is refused."""
        if model not in AGENT_REPORTS or not isinstance(data, dict):
            return data, None
        known, unknown = known_fields(data, model)
        if not unknown or unstorable_place(data):  # text no message may hold, in any key or value: refused
            return data, None  # by the model, as before
        first = (model.__name__, unknown) not in self._told and len(self._told) < 64  # bounded: told, not kept
        if first:
            self._told.add((model.__name__, unknown))
        return known, unknown if first else None


def known_fields(data: dict[str, Any], model: type[BaseModel]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``data``'s top-level fields ``model`` knows, and the names of the others (escaped, sorted, 16 at most): what
    a newer release's message is read as (``NewerFields``; an agent's order: ``zen.agent.orders``)."""
    unknown = sorted(escape_unstorable(str(name), 64) for name in data if name not in model.model_fields)
    return {name: value for name, value in data.items() if name in model.model_fields}, tuple(unknown[:16])


SEQ_AHEAD_S = 300  # how far ahead of Zen's clock a heartbeat's seq (epoch ms) may be


def check_seq(seq: int, now: datetime) -> None:
    """Refuse (``Rejected``) a heartbeat, a job's or a VM's, whose ``seq`` is more than ``SEQ_AHEAD_S``
    ahead of Zen's clock in epoch milliseconds, the agents' unit. Only a higher ``seq`` changes a row,
    so one message with a huge ``seq`` (INT64_MAX was accepted) made every later report of the
    attempt or the VM a duplicate: the job's end was never recorded and the sweep ran it again, or a
    VM stayed frozen as whatever that message said. GCE keeps VM clocks in step with its metadata
    server, and a delayed message has an older ``seq``, not a newer one; a VM whose clock runs
    5 minutes ahead has its reports refused and recorded with this reason, goes silent to the
    planner, and is replaced. Senders that count from 1 are far below the bound."""
    bound = int(now.timestamp() * 1000) + SEQ_AHEAD_S * 1000
    if seq > bound:
        raise Rejected(f"seq {seq} is more than {SEQ_AHEAD_S} s ahead of Zen's clock (agents send epoch "
                       f"milliseconds; now is {bound - SEQ_AHEAD_S * 1000}): the sender's clock is wrong")
