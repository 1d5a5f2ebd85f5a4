"""The attempts an agent that died was running (a crash, the OOM killer, a ``kill -9``), said ended by the agent
systemd restarts on the same VM, before its first pull.

Their jobs died with that agent: each job's supervisor dies with it (``zen.agent.launch``), and the new agent removes
every ``zen-*`` container left before it runs (``zen.agent.removal.remove_leftover_containers``). Each attempt the
journal marked as running and not ended (``Journal.left_running``) whose container is known gone (``Agent.left_gone``,
``gone_after``: docker lists no ``zen-*`` container left, or none of that attempt's own name) is reported PREEMPTED:
Zen requeues it at once, where it waited ``heartbeat_timeout_s`` for the lost-job sweep, and a VM running several jobs
had its claims refused for want of room meanwhile. An attempt whose container docker cannot remove, or all of them
when docker cannot list containers, is not reported: the VM retires (or is powered off), and the sweep ends that
attempt once its reports stop, as before; the VM's other attempts, their containers gone, are reported all the same
(where they waited for the sweep beside it, each spending an attempt), before the power-off
(``zen.agent.leftover.PowerOffAtStart``). Container mode only: a host process (local mode) is
not something docker can say is gone. An attempt whose job had ended, its outputs being uploaded, is resumed instead
when it may be (``zen.agent.resume``: ``end_left_running``).
Why: docs/reference/agent.md#final-reports-outlive-the-agent
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from zen.agent import resume
from zen.agent.journal import REPLAY_BUDGET_S, Journal
from zen.agent.removal import ContainersLeft, listed_gone
from zen.agent.reports import AttemptReport, Reporter
from zen.agent.runner import container_name
from zen.agent.settings import AgentSettings
from zen.agent.slots import Slots
from zen.core.models import AgentStatus


def gone_after(left: ContainersLeft | None, docker: str) -> Callable[[str, int], bool] | None:
    """Whether the container of an attempt a dead agent ran is known gone, once the ``zen-*`` containers it left were
    removed (``left``: why some were not, else None): each one's when docker listed none left; else each whose own
    name docker lists no container of (``removal.listed_gone``, asked once the removal is over). None when docker
    could not list the containers left: none is known gone."""
    if left is None:
        return lambda job_id, attempt: True
    if not left.found:
        return None
    return lambda job_id, attempt: listed_gone(container_name(job_id, attempt), docker)


def end_left_running(journal: Journal, reporter: Reporter, vm: str, project: str | None, settings: AgentSettings,
                     slots: Slots, clock: Callable[[], float], log: logging.Logger | logging.LoggerAdapter,
                     gone: Callable[[str, int], bool] = lambda job_id, attempt: True) -> list[resume.Resumption]:
    """Each attempt a dead agent of this VM ran (``Journal.left_running``) whose container is ``gone``: returned to be
    resumed when its job had ended and its upload may go on (``zen.agent.resume.take``: its directory locked now,
    before the work-dir sweep), else reported PREEMPTED (``report_left_running``). One whose container may be there
    is neither: it is left to the sweep (the VM retires: ``zen.agent.__main__``)."""
    left = []
    for job_id, attempt in journal.left_running():
        if gone(job_id, attempt):
            left.append((job_id, attempt))
        else:
            log.error("an attempt the previous agent ran is not reported: its container could not be removed", extra={
                "job_id": job_id, "attempt": attempt, "container": container_name(job_id, attempt)})
    resumed, preempted = resume.take(journal, left, settings, project, slots, clock)
    report_left_running(journal, reporter, vm, log, preempted)
    return resumed


def report_left_running(journal: Journal, reporter: Reporter, vm: str, log: logging.Logger | logging.LoggerAdapter,
                        left: Sequence[tuple[str, int, str | None]] | None = None) -> int:
    """Report each attempt a dead agent of this VM ran PREEMPTED (``left``: those, each with why its upload was not
    resumed when its job had ended; None: ``Journal.left_running``); returns how many were sent.

    PREEMPTED, not FAILED, and not silence: the VM's agent ended the attempt, not the job. Zen takes a PREEMPTED from
    the VM holding an attempt as the VM's doing (``zen.core.lifecycle.preempted_by_cloud``): the job is requeued at
    once, its attempt unspent, ``FREE_PREEMPTIONS`` times (so a job that gets its agent killed again and again, by
    eating the VM's memory, still ends); a stopping job ends as it would when its VM goes away. FAILED would charge
    the job with its agent's death, and silence spends an attempt (the sweep's LOST). Each report is journaled as
    any final report is, its message saying the VM restarted when its mark is of an earlier boot
    (``Journal.rebooted``: a host event, a reboot; not the agent's crash): one not sent now is sent again
    (``Agent._resend_kept``), by this agent or the next. Its ``seq`` is this agent's, above every report of the dead one; an attempt that ended meanwhile makes it stale, and
    Zen drops it."""
    sent = 0
    for job_id, attempt, why in [(j, a, None) for j, a in journal.left_running()] if left is None else left:
        log.warning("an attempt the previous agent ran ended with it; reported PREEMPTED", extra={
            "job_id": job_id, "attempt": attempt, **({"reason": why} if why else {})})
        died = ("while the job ran (a crash, or the OOM killer) and was restarted; the job's container went with it"
                if why is None else f"after the job ended, before its outputs were all uploaded, and was restarted; "
                                    f"the upload was not resumed: {why}")
        said = (f"VM {vm} restarted (a host event, a reboot) while the job ran; the job's container went with it"
                if why is None and journal.rebooted(job_id, attempt) else f"the agent on VM {vm} died {died}")
        sent += reporter.job(AttemptReport(job_id, attempt), AgentStatus.PREEMPTED, budget_s=REPLAY_BUDGET_S,
                             message=f"zen: {said} (requeued, no attempt spent)")
    return sent
