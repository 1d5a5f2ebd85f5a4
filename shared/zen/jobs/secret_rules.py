"""Which secrets a job may name: its queue's ``secrets`` patterns, or without queues the configuration's
top-level ``secrets`` (none by default), checked as the job is submitted (``zen.jobs.placement``).
The rule: docs/how-to/queues.md#secrets
"""

from __future__ import annotations

from zen.core.config import ZenConfig
from zen.core.errors import Rejected
from zen.core.secrets import refused_reference


def check_secrets(config: ZenConfig, secrets: dict[str, str] | None, queue: str | None) -> None:
    """``Rejected``, naming the variable, the reference and the rule, unless every reference in ``secrets``
    is allowed to a job of ``queue`` (None: this Zen has no queues)."""
    if not secrets:
        return
    rule = config.queue(queue) if queue is not None else None
    if rule is not None:
        reason = refused_reference(secrets, rule.secrets, f"queue {rule.name}")
    else:
        reason = refused_reference(secrets, config.secrets, "this Zen (it has no queues)")
    if reason is not None:
        raise Rejected(reason)
