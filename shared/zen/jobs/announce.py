"""What Zen publishes about jobs, built from a job and its change: the history rows and
``zen-job-events`` messages of each status change, a VM's orders (``zen-vm-control``) and a job's
start message (``zen-job-start``, with the attributes its subscriptions filter on; or, while the job's
start is offered to warm VMs, one copy per VM on ``zen-vm-control``: ``zen.core.routing``)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Callable, Literal

from zen.adapters.message_key import SEALED_KEY_ATTRIBUTE
from zen.core import gang, lifecycle
from zen.core.checkpoints import CheckpointSpec
from zen.core.config import Topics, ZenConfig
from zen.core.models import START_OFFER, ControlAction, ControlMessage, Heartbeat, Job, JobEvent, JobStatus, StartMessage
from zen.core.stops import MADE, MOVES, made_attribute
from zen.jobs.outgoing import OutgoingMessage, outgoing

QueueEvent = Literal["job.admitted", "job.preempted"]
RejectionEvent = Literal["job.rejected", "job.message_ignored"]

log = logging.getLogger("zen.jobs.service")


def start_attributes(job: Job, cluster_regions: list[str]) -> dict[str, str]:
    """Attributes of a start message, shaped for Pub/Sub subscription filters (see StartMessage): the
    regions it reaches are the job's narrowed ``start_regions`` while set (``zen.core.routing``), else its
    allowed regions."""
    reach = job.start_regions or job.regions
    attributes = {
        "cluster": job.cluster,
        "job_id": job.job_id,
        "attempt": str(job.attempt),
        "regions": ",".join(reach) if reach != cluster_regions else "*",
    }
    if reach == cluster_regions:
        attributes["allow_any"] = "1"
    for region in reach:
        attributes[f"allow_{region.replace('-', '_')}"] = "1"
    if job.request.get("requires_tags"):  # its regions are already narrowed to these groups
        attributes["requires_tags"] = ",".join(sorted(job.request["requires_tags"]))
    return attributes


class Refusal(JobEvent):
    """A ``job.rejected`` / ``job.message_ignored``: ``named_job_id`` is the id its message named when its sender is
    not shown to be that job's (``zen.jobs.rejections``); ``job_id`` is then unset."""

    named_job_id: str | None = None


class Announcements:
    def __init__(self, config: ZenConfig):
        self._config = config
        self._topics = config.topics

    def history(self, before: Job, after: Job, changes: list[lifecycle.Change], *, actor: str, now: datetime,
                 from_status: JobStatus | None) -> tuple[list[dict[str, Any]], list[OutgoingMessage]]:
        """History rows and ``zen-job-events`` messages for each change, in order."""
        rows, messages = [], []
        previous = from_status
        for change in changes:
            # LOST belongs to the attempt that was lost; the requeue to the new attempt; a lost attempt's late
            # final report (the job's attempt goes back to it: zen.jobs.late_final) to that attempt.
            requeue = change.to is JobStatus.QUEUED and previous is JobStatus.LOST
            attempt = after.attempt if requeue or after.attempt < before.attempt else before.attempt
            rows.append(dict(job_id=before.job_id, at=now, actor=actor, attempt=attempt,
                             from_status=previous.value if previous else None, to_status=change.to.value,
                             reason=change.reason))
            event = JobEvent(
                type="job.status_changed", job_id=before.job_id, attempt=attempt, from_status=previous,
                to_status=change.to, reason=change.reason, at=now, cluster=after.cluster,
                region=after.region or before.region, vm=after.vm or before.vm, exit_code=after.exit_code,
            )
            messages.append(outgoing(self._topics.job_events, event, {
                "type": event.type, "job_id": before.job_id, "status": change.to.value, "cluster": after.cluster,
            }))
            previous = change.to
        return rows, messages

    @staticmethod
    def note(job: Job, reason: str, *, actor: str, now: datetime) -> dict[str, Any]:
        """A history row that changes no status (a start widened by ``zen.core.routing``)."""
        return dict(job_id=job.job_id, at=now, actor=actor, attempt=job.attempt, from_status=job.status.value,
                    to_status=job.status.value, reason=reason)

    def queue_event(self, kind: QueueEvent, job: Job, reason: str, now: datetime) -> OutgoingMessage:
        """``job.admitted`` (a queue's quota took the job) or ``job.preempted`` (admission takes it
        back); the status changes are announced as well."""
        event = JobEvent(type=kind, job_id=job.job_id, attempt=job.attempt, reason=reason, at=now,
                         cluster=job.cluster, queue=job.queue)
        return outgoing(self._topics.job_events, event, {
            "type": event.type, "job_id": job.job_id, "cluster": job.cluster, "queue": job.queue or ""})

    def rejection(self, event_type: RejectionEvent, job_id: str | None, job: Job | None, reason: str,
                  now: datetime, named_job_id: str | None = None) -> OutgoingMessage:
        """``job.rejected`` / ``job.message_ignored``: a message that can never succeed (``JobService.reject``);
        ``named_job_id``: the id a message named whose sender is not shown to be that job's (``zen.jobs.rejections``),
        announced apart from ``job_id``, which it leaves unset."""
        event = Refusal(type=event_type, job_id=job_id, attempt=job.attempt if job else None, reason=reason,
                        at=now, cluster=job.cluster if job else None, named_job_id=named_job_id)
        return outgoing(self._topics.job_events, event, {"type": event_type, **({"job_id": job_id} if job_id else {}),
                                                         **({"named_job_id": named_job_id} if named_job_id else {})})

    def control(self, control: ControlMessage, answering: Heartbeat | None = None,
                stop_left_s: float | None = None, refused: str | None = None,
                seal: Callable[[], str | None] | None = None, answers: int | None = None,
                moves: bool = False, made: datetime | None = None) -> OutgoingMessage:
        """An order to one VM. One that answers a report of that VM about the same attempt carries the
        report's ``seq`` in the attribute ``answers`` (an attribute, so older agents, which refuse
        unknown fields in the payload, still read it): an agent claiming an attempt again takes only
        the answers to its new claim, never a late one to a claim it gave up (``zen.agent.agent``).
        A STOP of the job's current attempt while it is STOPPING carries ``answer_within_s``, the
        seconds left before Zen ends the job without the VM's report (``silence.stop_left_s``), and
        ``answer_moves`` (``zen.core.stops.MOVES``): "1" when ``moves`` (that wait counts from the VM's last RUNNING:
        each STOP's deadline replaces the one before), else "0" (the earliest holds), and ``answer_made``
        (``zen.core.stops.MADE``): ``made``, when Zen made it (what ``answer_within_s`` counts from; the outbox may
        publish it later, or twice).
        A RELEASE that refuses that report's claim carries its cause in ``refused`` (``zen.jobs.claims``); a
        CONFIRM of it, the VM's MAC key encrypted to its message key (``seal()``: ``zen.adapters.message_key``).
        ``answers``: the seq of the report of this VM an order answers when ``answering`` is another VM's (a gang's
        CONFIRM to each node, answering its last claim: its agent counts its lease from that claim's sending)."""
        attributes = {"vm": control.vm, "job_id": control.job_id, "attempt": str(control.attempt),
                      "action": control.action.value}
        if stop_left_s is not None and control.action is ControlAction.STOP:
            attributes["answer_within_s"] = f"{stop_left_s:.0f}"
            attributes[MOVES] = "1" if moves else "0"
            if made is not None:
                attributes[MADE] = made_attribute(made)
        if answering is not None and (answering.vm, answering.job_id, answering.attempt) == (
                control.vm, control.job_id, control.attempt):
            attributes["answers"] = str(answering.seq)
            if refused is not None and control.action is ControlAction.RELEASE:
                attributes["refused"] = refused
            if seal is not None and control.action is ControlAction.CONFIRM and (sealed := seal()):
                attributes[SEALED_KEY_ATTRIBUTE] = sealed
        elif answers is not None:
            attributes["answers"] = str(answers)
        return outgoing(self._topics.vm_control, control, attributes)

    def start(self, job: Job) -> list[OutgoingMessage]:
        """The job's start message: on ``zen-job-start``, or, while ``job.start_vms`` is set, one copy to
        each of those VMs on ``zen-vm-control`` (``vm=<name>`` is what its control subscription filters
        on; ``kind=start`` tells the agent an offer from an order: ``zen.agent.slots.ControlRouter``)."""
        request = job.request
        message = StartMessage(
            job_id=job.job_id, attempt=job.attempt, cluster=job.cluster, user_id=job.user_id,
            image=request.get("image"), command=request.get("command"), env=request.get("env", {}),
            regions=job.regions, max_runtime_s=job.max_runtime_s, labels=request.get("labels", {}),
            inputs=request.get("inputs"), outputs=request.get("outputs"), secrets=request.get("secrets"),
        )
        if (asked := request.get("checkpoint")) is not None and (
                checkpoint := self._config.checkpoints.start(CheckpointSpec.model_validate(asked), job.cluster, job.job_id)):
            message = message.model_copy(update={"checkpoint": checkpoint})
        if job.preemptions:  # an attempt after a preemption: the job may resume from its checkpoint
            message = message.model_copy(update={"env": {**message.env, "ZEN_PREEMPTED": "1"}})
        cluster = self._config.cluster(job.cluster)
        if cluster is not None and 0 < job.gpus < cluster.gpu_count:  # it leaves room on its VM for others
            message = message.model_copy(update={"gpus": job.gpus})
        if cluster is None:
            # The cluster left the configuration while the job was queued: agents of a re-added
            # cluster can still take it; until then nobody does. Say so loudly.
            log.error("job's cluster is not configured", extra={"job_id": job.job_id, "cluster": job.cluster})
        if job.nodes > 1:  # a gang: a start for each node not claimed yet, the first claim's region only (zen.core.gang)
            message = message.model_copy(update={"nodes": job.nodes, "assemble_s": gang.node_wait_s(self._config.gangs)})
            copies = job.nodes - len(job.gang or ())
            return [outgoing(self._topics.job_start, message, start_attributes(job, cluster.regions if cluster else []))
                    for _ in range(copies)]
        if job.start_vms and job.widen_at is not None:  # an offer only with its widening due (zen.core.routing)
            return [outgoing(self._topics.vm_control, message, {
                "vm": vm, "kind": START_OFFER, "job_id": job.job_id, "attempt": str(job.attempt),
                "cluster": job.cluster}) for vm in job.start_vms]
        cluster_regions = cluster.regions if cluster else []
        return [outgoing(self._topics.job_start, message, start_attributes(job, cluster_regions))]


def is_start(message: OutgoingMessage, topics: Topics) -> bool:
    """A job's start message, published to start subscriptions or offered to a VM."""
    return message.topic == topics.job_start or (
        message.topic == topics.vm_control and message.attributes.get("kind") == START_OFFER)
