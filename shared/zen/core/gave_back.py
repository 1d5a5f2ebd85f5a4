"""What an attempt's end says when its agent reports it PREEMPTED (``zen.core.lifecycle._advance``).

An agent reports PREEMPTED when its VM shuts down (a spot VM's preemption, maintenance, a flex-start run's end), and
also when a step before the job's command failed by the cloud's or the VM's fault, not the job's: its secrets
(``zen.agent.secrets``: Secret Manager unavailable past its budget), its inputs or checkpoint (``zen.agent.transfer``:
Cloud Storage unavailable), docker's pull cut short (``zen.agent.container.PULL_CUT``), its agent dead and restarted
(``zen.agent.restart``). Zen reruns each without spending an attempt (``FREE_PREEMPTIONS`` times). Only the first is
"VM ... was preempted"; the others are told by the agent's own note, the first line of the report's message: the
step that failed and why, in the job's history, its notices and, once its free reruns are spent, its FAILED."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

Change = TypeVar("Change", bound=Any)  # zen.core.lifecycle.Change (which imports this module)

BRIEF_CHARS = 300  # of the agent's note, in the reason (the report's message keeps all of it)


def shut_down(vm: str, message: str | None) -> bool:
    """Whether the agent's report says its VM shut down (or says nothing: an agent's bare PREEMPTED). Any line of it:
    a job's own note may come first (a shutdown cut the upload after its end: ``zen.agent.attempt``)."""
    lines = [line.strip().removeprefix("zen: ") for line in (message or "").splitlines()]
    return not any(lines) or any(line.startswith((f"VM {vm} shut down", f"VM {vm} is shutting down")) for line in lines)


def named(changes: list[Change], vm: str, message: str | None) -> list[Change]:
    """``changes`` (``lifecycle.preempted_by_cloud``'s) with "VM ... was preempted" replaced by the agent's reason
    when its report says its VM did not shut down."""
    if shut_down(vm, message):
        return changes
    brief = _first_line(message).removesuffix(" (requeued)").removesuffix(" (requeued, no attempt spent)")  # said after
    said = f"VM {vm} gave the attempt back ({brief[:BRIEF_CHARS]})"
    return [replace(change, reason=change.reason.replace(f"VM {vm} was preempted", said)) for change in changes]


def _first_line(message: str | None) -> str:
    return next((line.strip() for line in (message or "").splitlines() if line.strip()), "").removeprefix("zen: ")
