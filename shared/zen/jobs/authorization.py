"""What a principal may do with a job: submit it to its queue at its priority, and stop it. The rules
are the configuration's (``auth:`` and each queue's ``submitters``, ``admins``, ``max_priority``;
patterns: ``zen.core.principals``); each refusal names the rule that refused and what to do instead.
Who the principal is comes from the message's proof (``zen.adapters.submitters``).
"""

from __future__ import annotations

from zen.core.config import QueueConfig, ZenConfig
from zen.core.models import Job
from zen.core.principals import matches


def _who(patterns: list[str]) -> str:
    return ", ".join(patterns) if patterns else "none"


def may_submit(config: ZenConfig, principal: str, queue_name: str | None, priority: int) -> str | None:
    """Why ``principal`` may not submit a job of ``priority`` to queue ``queue_name`` (None: it may).
    Without queues anyone may; a queue's ``submitters`` (unset: anyone), its ``users`` and ``admins``
    and Zen's ``auth.admins`` may submit to it, and its ``max_priority`` caps every job's priority."""
    queue: QueueConfig | None = config.queue(queue_name) if queue_name else None
    if queue is None:
        return None
    auth = config.auth
    if queue.submitters is not None and not (
            matches(principal, queue.submitters + queue.admins + queue.users, auth.groups) or auth.admin(principal)):
        return (f"{principal} may not submit to queue {queue.name} (its submitters: {_who(queue.submitters)}; its "
                f"admins: {_who(queue.admins)}): use a queue you may (zen queues lists them), or ask an admin of "
                f"{queue.name} to add you")
    if queue.max_priority is not None and priority > queue.max_priority:
        return (f"priority {priority} is above queue {queue.name}'s max_priority {queue.max_priority}: ask for "
                f"{queue.max_priority} or less")
    return None


def may_stop(config: ZenConfig, principal: str, job: Job) -> str | None:
    """Why ``principal`` may not stop ``job`` (None: it may): only its owner, an admin of its queue, or
    one of Zen's (``auth.admins``)."""
    auth = config.auth
    if principal.lower() == job.user_id.lower() or auth.admin(principal):
        return None
    queue = config.queue(job.queue) if job.queue else None
    if queue is not None and matches(principal, queue.admins, auth.groups):
        return None
    admins = f"an admin of its queue {queue.name} ({_who(queue.admins)}) or " if queue is not None else ""
    return (f"{principal} may not stop job {job.job_id}, which is {job.user_id}'s: only its owner, {admins}"
            f"an admin of Zen (auth.admins: {_who(auth.admins)}) may")

