"""One transfer of an attempt's data (staging its inputs, uploading its outputs) run in the background
while the attempt heartbeats, and what may cut it: the VM's shutdown, a STOP, the fence, Zen's stop
deadline, its own time limit (``transfer``); ``run_in_background`` runs any work so.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Callable, Protocol

from zen.agent.staging import AttemptData, Progress, TransferError, Unavailable
from zen.core.models import AgentStatus, ControlAction, ControlMessage

log = logging.getLogger("zen.agent.attempt")  # the attempt's logger: its lines are the attempt's
SHUTDOWN_JOIN_S = 1.0  # a transfer the VM's shutdown cut short is waited for this long at most


class Listen(Protocol):
    """One slice of the attempt while it transfers (``zen.agent.attempt.AttemptRunner.listen``): its
    RUNNING heartbeat when due at ``next_beat``, with ``message`` and ``data``; returns the next, and the
    control message about it, if one came."""

    def __call__(self, next_beat: float, *, message: str | None = None,
                 data: dict[str, int | float] | None = None) -> tuple[float, ControlMessage | None]: ...


def run_in_background(work: Callable[[], object], tick: Callable[[], bool], cancel: threading.Event,
                      grace_s: float | Callable[[], float] = 10.0) -> BaseException | None:
    """Run ``work`` in a thread, calling ``tick`` (which waits a little, e.g. for a control message)
    until it ends. When ``tick`` returns True the work is cancelled and waited for ``grace_s`` at most
    (a callable: asked then); past it, it is left to end by itself (a daemon thread). Returns the
    work's exception, if any."""
    outcome: dict[str, BaseException] = {}

    def target() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="zen-transfer", daemon=True)
    thread.start()
    while thread.is_alive():
        if tick():
            cancel.set()
            thread.join(grace_s() if callable(grace_s) else grace_s)
            break
    return outcome.get("error")


def transfer(data: AttemptData, what: str, progress: Progress, work: Callable[[], Any], *, listen: Listen,
             stopping: Callable[[], bool], clock: Callable[[], float], shut_down: Callable[[str], str],
             shutdown_grace_s: float = 0.0, grace_s: float = 10.0, stops: bool = True,
             shutdown_left: Callable[[], float] = lambda: math.inf, report_left: Callable[[], float] = lambda: math.inf,
             unavailable: str | None = None, limit_s: float | None = None, over: str = "",
             fenced: Callable[[], str | None] = lambda: None,
             verdict: Callable[[], str | None] = lambda: None) -> tuple[AgentStatus, str] | None:
    """Run one transfer (``work``: staging or uploading) in the background while the agent's ``listen``
    heartbeats the attempt with its progress. Returns the status and note when it failed (FAILED), a
    STOP came (STOPPED), or the agent is shutting down and ``shutdown_grace_s`` ran out, or
    ``shutdown_left()`` (the seconds by which the transfer must be over) came within ``SHUTDOWN_JOIN_S``
    (PREEMPTED). A transfer cut by a shutdown is waited for ``SHUTDOWN_JOIN_S`` at most, else ``grace_s``.

    ``stops`` False (the upload after the job ended): a STOP is acked and ignored. The job has ended
    or was stopped already, and Zen answers every RUNNING heartbeat of a stopping job with STOP again:
    a STOP that cut the upload lost a stopped job's checkpoint (written on SIGTERM). What bounds that
    upload is ``report_left()``: the seconds until Zen must have the stopped job's final report (a
    STOP's ``answer_within_s``, less the report's own time); at 0 the upload is cut (STOPPED), so the
    report tells the truth before Zen ends the job without it.

    ``unavailable`` (staging): the note, before the reason, of a transfer that failed by the VM's or the
    service's fault (``zen.agent.staging.Unavailable``), reported PREEMPTED so Zen requeues the job
    without spending an attempt (``zen.core.lifecycle.FREE_PREEMPTIONS`` times); any other failure is FAILED.

    ``limit_s``: the transfer's own bound (``max_runtime_s``: a stage that takes longer ends the attempt,
    as would the job running longer), in real seconds (``time.monotonic``, as ``RunningJob`` counts the
    job's); past it the transfer is cut, FAILED with ``over`` and what was done.

    ``verdict()``: the note once the disk watch stopped the attempt (staging): the transfer is cut, FAILED.
    ``fenced()``: the note once the attempt's fence fell (``zen.agent.fence``): the transfer is cut,
    PREEMPTED, whether it stages or uploads (Zen is about to run the job elsewhere).
    ``shut_down(what)``: the note of the transfer the VM's shutdown cut ("VM ... shut down while ...", Zen's word for
    a preemption; a host maintenance's own: ``zen.agent.shutdown.Shutdown.cut``)."""
    cut: list[tuple[AgentStatus, str]] = []
    next_beat, shutdown_at, join_s = clock(), None, grace_s
    limit_at = time.monotonic() + limit_s if limit_s is not None else math.inf

    def tick() -> bool:
        nonlocal next_beat, shutdown_at, join_s
        if stopping():
            shutdown_at = shutdown_at or clock() + shutdown_grace_s
            if clock() >= shutdown_at or shutdown_left() <= SHUTDOWN_JOIN_S:
                cut.append((AgentStatus.PREEMPTED, f"zen: {shut_down(what)}"))
                join_s = min(grace_s, SHUTDOWN_JOIN_S)
                return True
        if (note := fenced()) is not None:
            cut.append((AgentStatus.PREEMPTED, f"{note} ({progress.describe()} done)"))
            join_s = min(grace_s, SHUTDOWN_JOIN_S)
            return True
        if (note := verdict()) is not None:  # the disk watch stopped it (zen.agent.diskquota): the job's fault
            cut.append((AgentStatus.FAILED, f"{note} ({progress.describe()} done)"))
            join_s = min(grace_s, SHUTDOWN_JOIN_S)
            return True
        if report_left() <= 0:
            cut.append((AgentStatus.STOPPED, f"zen: stopped while {what}: cut when Zen's stop deadline came "
                                             f"({progress.describe()} done)"))
            join_s = min(grace_s, SHUTDOWN_JOIN_S)
            return True
        if time.monotonic() >= limit_at:
            cut.append((AgentStatus.FAILED, f"{over} ({progress.describe()} done)"))
            join_s = min(grace_s, SHUTDOWN_JOIN_S)
            return True
        next_beat, order = listen(next_beat, message=f"zen: {what}: {progress.describe()} so far",
                                  data=data.heartbeat_fields())
        if order is not None and order.action is ControlAction.STOP:
            if stops:
                cut.append((AgentStatus.STOPPED, f"zen: stopped while {what} ({order.reason or 'stop requested'})"))
            else:
                log.info(f"stop ignored while {what}: the job has ended", extra={
                    "job_id": data.job_id, "attempt": data.attempt, "reason": order.reason})
        return bool(cut)

    error = run_in_background(work, tick, data.cancel, lambda: join_s)
    if cut:
        return cut[0]
    if isinstance(error, Unavailable) and unavailable:
        return AgentStatus.PREEMPTED, f"{unavailable}: {error}"
    if error is not None:
        reason = str(error) if isinstance(error, TransferError) else f"zen agent error: {error!r}"
        return AgentStatus.FAILED, f"zen: {reason}"
    return None
