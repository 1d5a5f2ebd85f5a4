"""When an attempt that its own final report ends ended: when Pub/Sub took that report (the message's
``publishTime``, Pub/Sub's own clock), not when Zen read it. A report held back by an outage of Zen's (the
functions or Postgres down, Pub/Sub keeping the message and delivering it again later) is not billed the
outage; a VM's clock plays no part (its ``sent_at`` is not read: an agent whose clock is behind was billed
too little), and every delivery of one message carries the time it was first published.

The end is held between the attempt's start (its run's, else when Zen heard its claim) and now; a gang's also
after Zen last heard its other nodes, which may have run to then (``zen.core.gang``), a node that ended by its own
report until that report was published (held the same way). The job's ``finished_at``
and the attempt's usage row (``zen.jobs.decisions``) both take it; its history row keeps when Zen read the
report, and says when the attempt ended once the two are a minute or more apart. Why: docs/explanations/accounting.md.
"""

from __future__ import annotations

from datetime import datetime, timezone

from zen.core import gang
from zen.core.gang_records import GangConfig
from zen.core.lifecycle import Change, Decision
from zen.core.models import AgentStatus, Heartbeat, Job, JobStatus

FINAL = frozenset({AgentStatus.SUCCEEDED, AgentStatus.FAILED, AgentStatus.STOPPED, AgentStatus.PREEMPTED})
OVER = (JobStatus.LOST, JobStatus.PENDING)  # an attempt lost, or over with the job to run again (a retry, a queue's)
NOTED_AFTER_S = 60.0  # a report read this much after it was published: its history row says when the attempt ended


def decide(job: Job, hb: Heartbeat, now: datetime, published: datetime | None, config: GangConfig,
           created: datetime | None = None) -> Decision:
    """``gang.decide_heartbeat`` (``created``: the reporting VM's creation); the attempt a final report ends, ended
    when Pub/Sub ``published`` it (above)."""
    decision = gang.decide_heartbeat(job, hb, now, config, created)
    if hb.status in FINAL and published is not None:
        _node_ended(job, hb, decision, now, published)
    end = next((i for i, change in enumerate(decision.changes) if change.to.terminal or change.to in OVER), None)
    if hb.status not in FINAL or end is None or (ended := ended_at(job, hb, decision, now, published)) >= now:
        return decision  # (a gang's node whose end leaves the others to stop ends no attempt yet)
    decision.ended_at = ended
    if decision.fields.get("finished_at") == now:
        decision.fields["finished_at"] = ended
    if (late := (now - ended).total_seconds()) >= NOTED_AFTER_S:  # said by the change that ends it
        change = decision.changes[end]
        decision.changes[end] = Change(change.to, f"{change.reason}; the attempt ended at "
                                       f"{ended.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC, when its final "
                                       f"report was published ({late:.0f} s before Zen read it): billed to then")
    return decision


def _node_ended(job: Job, hb: Heartbeat, decision: Decision, now: datetime, published: datetime) -> None:
    """A gang's node whose own final report ``decision`` took (its end, heard ``now``: ``zen.core.gang``) ended when
    Pub/Sub ``published`` that report, held between the gang's claim and now: its VM is charged until then, and the
    attempt's end counts from then, not from when Zen read it (read after an outage, the outage was billed)."""
    node = next((n for n in decision.fields.get("gang") or () if n.vm == hb.vm), None)
    if node is None or node.status != hb.status.value or node.beat_at != now:  # (an end kept, or no word of its own)
        return
    ended = min(now, max(published, node.confirmed_at or job.started_at or now))
    decision.fields["gang"] = [n.model_copy(update={"beat_at": ended}) if n.vm == hb.vm else n
                               for n in decision.fields["gang"]]


def ended_at(job: Job, hb: Heartbeat, decision: Decision, now: datetime, published: datetime | None) -> datetime:
    """When the attempt ``decision`` ends ended: ``published`` held between its start and ``now`` (now when no
    publish time came, or the report claims the attempt as it ends it: its start is now)."""
    if published is None or any(change.to is JobStatus.ASSIGNED for change in decision.changes):
        return now
    start = decision.fields.get("started_at") or job.started_at or job.last_heartbeat_at or now  # (its claim's)
    others = [node.beat_at for node in decision.fields.get("gang") or job.gang or () if node.vm != hb.vm]
    return min(now, max(published, start, *others))
