"""What an attempt's end says when its agent reports it PREEMPTED (``zen.core.lifecycle._advance``).

An agent reports PREEMPTED when its VM shuts down (a spot VM's preemption, maintenance, a flex-start run's end), and
also when a step before the job's command failed by the cloud's or the VM's fault, not the job's: its secrets
(``zen.agent.secrets``: Secret Manager unavailable past its budget), its inputs or checkpoint (``zen.agent.transfer``:
Cloud Storage unavailable), docker's pull cut short (``zen.agent.container.PULL_CUT``), its agent dead and restarted
(``zen.agent.restart``). Zen reruns each without spending an attempt (``FREE_PREEMPTIONS`` times). Only the first is
"VM ... was preempted" (a host maintenance's notice aside: "VM ... is stopping for host maintenance",
``zen.agent.shutdown.Shutdown.said``, read on any line of the note, as a shutdown's is); the others are told by the
agent's own note, the first line of the report's message: the step that failed and why, in the job's history, its
notices and, once its free reruns are spent, its FAILED. A gang's node so is "node K (VM) gave the attempt back
(...)" where one preempted is "node K (VM) was preempted" (``zen.core.gang``: the gang's fate as for a preemption),
and a PREEMPTED notice of such an attempt says the job "was requeued" (``zen.core.notify.verb``: its notice kind
stays PREEMPTED)."""

from __future__ import annotations

import re
from dataclasses import Field, replace
from typing import Any, ClassVar, Protocol, TypeVar


class _Told(Protocol):
    """A ``zen.core.lifecycle.Change``, not imported: lifecycle imports this module, as ``zen.core.notify`` does."""
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def reason(self) -> str: ...


Change = TypeVar("Change", bound=_Told)

BRIEF_CHARS = 300  # of the agent's note, in the reason (the report's message keeps all of it)
MAINTENANCE = "is stopping for host maintenance"  # what a VM GCE stops after its notice does (Shutdown.said)
SAID = "gave the attempt back"  # what a VM did, in the reason, where its agent's note follows in brackets
# What the agent's note says of the attempt's rerun, said after it by Zen (the rerun, or its end once free reruns are
# spent): "(requeued)", "(requeued, no attempt spent)", "(requeued; VM ... takes no more jobs)" (its VM's retirement:
# kept, as "; VM ... takes no more jobs").
_REQUEUED = re.compile(r" \(requeued(?:, no attempt spent|; (?P<more>[^()]*))?\)")


def shut_down(vm: str, message: str | None) -> bool:
    """Whether the agent's report says its VM shut down (or says nothing: an agent's bare PREEMPTED). Any line of it:
    a job's own note may come first (a shutdown cut the upload after its end: ``zen.agent.attempt``)."""
    lines = _lines(message)
    return not lines or any(line.startswith((f"VM {vm} shut down", f"VM {vm} is shutting down")) for line in lines)


def stopping_for_maintenance(vm: str) -> str:
    """What a report says of ``vm`` that GCE stops after its host maintenance's notice (``MAINTENANCE``: the agent's
    ``Shutdown.said`` and ``Shutdown.before_start``), read back on any line of the note (``why``)."""
    return f"VM {vm} {MAINTENANCE}"


def named(changes: list[Change], vm: str, message: str | None) -> list[Change]:
    """``changes`` (``lifecycle.preempted_by_cloud``'s) with "VM ... was preempted" replaced by the agent's reason
    when its report says its VM did not shut down."""
    return reworded(changes, {vm: why(vm, message)})


def why(vm: str, message: str | None) -> str | None:
    """What ``vm`` did instead of being preempted, by its agent's PREEMPTED report's ``message``: "gave the attempt
    back (<the agent's note>)", or the note itself where it tells the VM's own doing ("VM <vm> restarted (a host
    event, a reboot) ...", "VM <vm> could not stage ..."), said of the VM once; None when the report says its VM shut
    down (it was preempted). The note's word of its requeue goes: Zen says what came of it after. A gang's node keeps
    it (``GangNode.gave_back_why``): the attempt's end, decided on another node's later report, names it so too."""
    if shut_down(vm, message):
        return None
    brief = _REQUEUED.sub(lambda said: f"; {said['more']}" if said["more"] else "", _first_line(message, vm))
    own = brief.removeprefix(f"VM {vm} ")
    return own[:BRIEF_CHARS] if own != brief else f"{SAID} ({brief[:BRIEF_CHARS]})"


def told(reason: str | None) -> bool:
    """Whether an attempt's end (its change to LOST's reason) says its VM gave it back (``why``): not preempted."""
    return f" {SAID} (" in (reason or "")


def reworded(changes: list[Change], said: dict[str, str | None]) -> list[Change]:
    """``changes`` with each VM of ``said`` that has a word, said "was preempted" ("VM ..." as one VM, "node N (...)" as
    a gang's node: ``zen.core.gang``), saying it instead."""
    return [replace(change, reason=reason(change.reason, said)) for change in changes]


def reason(text: str, said: dict[str, str | None]) -> str:
    """``text`` with each VM of ``said`` that has a word, said "was preempted" ("VM ...", or a gang's "node N (...)"),
    saying it instead (this module's give-backs; a flex-start run's end: ``zen.jobs.flex_end``)."""
    for vm, word in said.items():
        if word:
            text = text.replace(f"VM {vm} was preempted", f"VM {vm} {word}").replace(f"({vm}) was preempted",
                                                                                     f"({vm}) {word}")
    return text


def _lines(message: str | None) -> list[str]:
    """The note's lines that say something, each without its ``zen: ``."""
    return [line.strip().removeprefix("zen: ") for line in (message or "").splitlines() if line.strip()]


def _first_line(message: str | None, vm: str) -> str:
    """The note's first line, but its line of ``vm``'s host maintenance (``MAINTENANCE``) if any: as a shutdown's
    (``shut_down``), GCE's stop may cut a step after a note of the attempt's own (a job that exited 0, its upload
    cut, after a checkpoint save that failed or an agent restarted): that note did not end the attempt."""
    lines, said = _lines(message), stopping_for_maintenance(vm)
    return next((line for line in lines if line.startswith(said)), lines[0] if lines else "")
