"""The checkpoint's last save, once an attempt's job has ended (``save_last``), before its outputs are uploaded
(``zen.agent.attempt.AttemptRunner._end``). How checkpoints work: ``zen.agent.checkpoint``."""

from __future__ import annotations

from typing import Callable

from zen.agent.checkpoint import AFRESH, LATER, Checkpoint
from zen.agent.staging import AttemptData, Progress
from zen.core.models import AgentStatus

END_SAVE = "the attempt ended"  # the last save's reason: the one the final report may name as the latest
UPLOAD_GRACE_S = 15.0  # the most an upload of outputs (or the last save) is given once the VM is shutting down

# ``AttemptRunner._transfer`` for one attempt: (what, progress, work, shutdown_grace_s=, stops=, limit_s=, over=).
Transfer = Callable[..., "tuple[AgentStatus, str] | None"]


def save_last(transfer: Transfer, data: AttemptData, checkpoint: Checkpoint, note: str | None,
              limit_s: float | None) -> str | None:
    """The checkpoint's last save, once the job has ended (stopped, preempted: after its stop grace, time to write
    it), before the outputs: bounded as their upload is. Its failure changes no status: it is said in the note,
    and the checkpoint saved before (if any: ``Checkpoint.kept``) stays the latest (``zen.agent.checkpoint``); refused
    for a later attempt's save (``LATER``: this one was Zen's lost attempt), that save stays the latest, as the note
    says, never "the previous checkpoint is kept" nor "starts afresh" (the next attempt restores it); failed or cut
    otherwise while a later attempt's manifest is there, the note says so too (``Checkpoint.left``)."""
    checkpoint.stop_periodic()  # (a periodic save under way may still land: which landed last is asked below)
    saved: Progress = checkpoint.saved
    cut = transfer("saving the checkpoint", saved, lambda: checkpoint.save(END_SAVE, data.cancel),
                   shutdown_grace_s=UPLOAD_GRACE_S, stops=False, limit_s=limit_s,
                   over=f"zen: saving the checkpoint exceeded its budget, max_runtime_s={limit_s}")
    closed = checkpoint.close()  # before the report: no save writes the manifest once it said what was saved
    data.cancel.clear()  # a cut save leaves the outputs their own chance
    lines = checkpoint.notes[-2:]  # the periodic saves' failures, the last ones (and close's)
    if cut is not None and closed:  # cut while its manifest was written: the save is the latest after all
        if checkpoint.latest_why == END_SAVE:
            lines.append(f"{cut[1]}; the save completed as it was cut, and is the latest")
        elif cut[1].endswith(("kept", AFRESH, *LATER)):
            lines.append(cut[1])
        else:  # (the manifest read only here: at a shutdown its seconds are few)
            lines.append(f"{cut[1]}; {checkpoint.left('the previous checkpoint is kept')}")
    return "\n".join(line for line in (note, *lines) if line) or None
