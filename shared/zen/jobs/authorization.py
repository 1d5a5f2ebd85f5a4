"""What a principal may do with a job: submit it to its queue at its priority, name the secrets it names
(in its ``secrets`` and its ``notify``) and the data (``data_clearance``'s ``readers``), and stop it. The rules are the configuration's (``auth:`` and each queue's ``submitters``, ``admins``,
``max_priority``, ``secrets``; patterns: ``zen.core.principals``, ``zen.core.secrets``); each refusal
names the rule that refused and what to do instead. Who the principal is comes from the message's
proof (``zen.adapters.submitters``). The rules: docs/how-to/queues.md#who-may-use-a-queue, #secrets.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Iterable

from zen.core.clearance import touches
from zen.core.config import QueueConfig, ZenConfig
from zen.core.errors import Rejected
from zen.core.models import Job
from zen.core.notify import NotifyTarget, refused_target
from zen.core.principals import matches
from zen.core.secrets import refused_reference

EARLY_STOP_KEPT = timedelta(days=7)  # a stop for a job no one has submitted yet is kept this long (zen.jobs.sweeps)


def _who(patterns: list[str]) -> str:
    return ", ".join(patterns) if patterns else "none"


def may_submit(config: ZenConfig, principal: str, queue_name: str | None, priority: int,
               data: Iterable[str] = ()) -> str | None:
    """Why ``principal`` may not submit a job of ``priority`` to queue ``queue_name`` (None: it may).
    Without queues anyone may; a queue's ``submitters`` (unset: anyone), its ``users`` and ``admins``
    and Zen's ``auth.admins`` may submit to it, and its ``max_priority`` caps every job's priority. A job's
    ``data`` (its gs:// inputs and outputs) under a ``data_clearance`` binding with ``readers`` is theirs and Zen's
    admins' alone: the agent stages it with its VM's account, so naming it is reading it."""
    if why := _data_refused(config, principal, list(data)):
        return why
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


def _data_refused(config: ZenConfig, principal: str, uris: list[str]) -> str | None:
    for number, binding in enumerate(config.data_clearance):
        if binding.readers is None or not any(touches(uri, binding.prefix) for uri in uris):
            continue
        if not (matches(principal, binding.readers, config.auth.groups) or config.auth.admin(principal)):
            return (f"{principal} may not name data under {binding.prefix} (data_clearance[{number}].readers: "
                    f"{_who(binding.readers)}): ask an admin of this Zen to add you")
    return None


def taken_id(job_id: str, owner: str, user: str) -> str:
    """Why a submission naming a ``job_id`` already used by another request is refused: job ids are one namespace for
    every user, so one another user took first is said so (not whose), with what to do."""
    if owner.lower() == user.lower():
        return f"job_id {job_id} is already used by a different request"
    return (f"job_id {job_id} is already used by another user's job (job ids are every user's, one namespace): give "
            "yours an id of your own, e.g. starting with your name as zen submit's own ids do")


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


def user_actor(sender: str | None) -> str:
    """The history's actor of a user's message: ``user:<proven e-mail>``, or ``user`` with no proven sender."""
    return f"user:{sender}" if sender else "user"


def kept_stop(config: ZenConfig, job: Job, kept: list[tuple[str, str | None]], proof_required: bool
              ) -> tuple[tuple[str, str | None] | None, list[tuple[str, str]]]:
    """Of the stops kept for ``job`` before it came (``kept``: (reason, proven sender), the first first), the
    first whose sender may stop it (None: none may), and (the history's actor, why not) of the others. A
    stop without a proven sender (kept while ``ZEN_AUTH`` was ``off``) applies only while it still is
    (``proof_required`` False): once proof is required, nobody is known to have sent it."""
    refused: list[tuple[str, str]] = []
    for _, sender in kept:
        if sender is None:
            if proof_required:
                refused.append(("user", "it came without proof of its sender (ZEN_AUTH was off), and proof is "
                                        "required now: send the stop again (`zen stop`)"))
        elif (why := may_stop(config, sender, job)) is not None:
            refused.append((user_actor(sender), why))
    no = {actor for actor, _ in refused}
    return next((stop for stop in kept if user_actor(stop[1]) not in no), None), refused


def check_secrets(config: ZenConfig, secrets: dict[str, str] | None, queue: str | None) -> None:
    """``Rejected``, naming the variable, the reference and the rule, unless every reference in ``secrets``
    is allowed to a job of ``queue``: its queue's ``secrets`` patterns, or without queues (None) the
    configuration's top-level ``secrets`` (none by default). Checked as the job is resolved
    (``zen.jobs.placement``), so ``zen submit`` refuses it before publishing too."""
    if not secrets:
        return
    rule = config.queue(queue) if queue is not None else None
    if rule is not None:
        reason = refused_reference(secrets, rule.secrets, f"queue {rule.name}")
    else:
        reason = refused_reference(secrets, config.secrets, "this Zen (it has no queues)")
    if reason is not None:
        raise Rejected(reason)


def check_notify(config: ZenConfig, notify: list[NotifyTarget] | None, queue: str | None) -> None:
    """``Rejected``, naming the field, unless the notifier could deliver to every target of ``notify``: a
    Slack or webhook secret the queue's rule allows (as ``check_secrets``) and the notifier may read
    (``notifications.secret_prefix``), an email address the configuration allows (``zen.core.notify``)."""
    for index, target in enumerate(notify or ()):
        where = f"notify.{index}"
        if (reason := refused_target(config.notifications, target, where, config.project)) is not None:
            raise Rejected(reason)
        if target.secret is not None:
            check_secrets(config, {f"{where}.{target.kind}": target.secret}, queue)
