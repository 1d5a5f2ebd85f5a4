"""The VM's shutdown, as the agent's parts see it: whether it was asked for, why, and how much of its one
deadline is left. A shutdown has one deadline: ``SHUTDOWN_S`` past the job's stop grace
(``ZEN_AGENT_STOP_GRACE_S``), from the request, every final report is sent; each step takes what is left
of it, keeping the time of the steps after it. A power-off the agent asks for (``power_off``: a job's container
docker cannot remove may still run) is a shutdown without the stop grace: the VM's other attempts are reported
PREEMPTED within ``POWER_OFF_S``, then the VM is powered off (``zen.agent.agent``).
Why these figures: docs/reference/agent.md (startup.sh's ``TimeoutStopSec``)
"""

from __future__ import annotations

import math
import threading
from typing import Callable

from zen.core import gave_back
from zen.core.models import StartMessage

SLICE_S = 0.2  # longest uninterrupted wait: how fast a shutdown request is noticed
SHUTDOWN_BUDGET_S = 5.0  # per report while shutting down, at most (a preempted VM has ~30 s in all)
# systemd kills the agent at the grace + 15 s (TimeoutStopSec, startup.sh): VM_STOPPING_S of the rest go
# to the VM's STOPPING, the last to closing the control stream.
SHUTDOWN_S = 10.0
VM_STOPPING_S = 2.0
POWER_OFF_S = 5.0  # a power-off the agent asks for comes this soon at most, the VM's other attempts reported first
# A spot VM's preemption: GCE stops it about 30 s after its notice, whatever the agent does. The jobs' grace is cut to
# this, so that it, the final reports (SHUTDOWN_S) and the VM's STOPPING (VM_STOPPING_S) end by 27 s (as GKE gives a
# spot node's pods 15 s of its 30): a longer ``stop_grace_s`` let GCE stop the VM mid-grace, the checkpoint's last save
# and every PREEMPTED report lost, the job found silent after its heartbeat timeout.
PREEMPTED_GRACE_S = 15.0
# Why a VM takes no more jobs once the metadata server gave it a host maintenance's notice
# (zen.agent.identity.watch_notice): a GPU VM cannot live-migrate, and GCE stops it within the hour (a standard one
# restarts). Its jobs run on meanwhile (those that end in time lose nothing); the shutdown that ends the others then
# says host maintenance (``Shutdown.said``). An attempt whose job has not started is given back (``before_start``).
HOST_MAINTENANCE = "host maintenance: GCE stops this VM within the hour"
NOTICE_S = 3600.0  # GCE's notice to a VM with GPUs: it stops the VM this long after it at most
# The end of a job killed at its max_runtime_s, past its stop grace and the upload of its outputs: the rest of its
# output shipped (zen.agent.attempt.OUTPUT_BUDGET_S, 20 s) and its final report sent (seconds), with room.
REPORT_S = 60.0


class Shutdown:
    """Asked for once (a signal, the VM's preemption or host maintenance, a test); read by the loop, the claims and the
    attempts."""

    def __init__(self, clock: Callable[[], float], stop_grace_s: float) -> None:
        self._clock = clock
        self._stop_grace_s = stop_grace_s
        self.reason: str | None = None
        self.power_off_reason: str | None = None  # why the VM is powered off once its attempts are reported
        self.maintenance = False  # a host maintenance's notice came: the shutdown to come is GCE stopping the VM
        self.noticed_at: float | None = None  # when (the clock's) that notice came (``notice``)
        self._job_grace_s = stop_grace_s  # a job's, whatever a power-off cuts of the shutdown's
        self._at: float | None = None  # when asked for (the clock's): the deadline counts from it
        self._cut = threading.Lock()  # the grace cut by a power-off (an attempt's thread) and a preemption (the watch's)

    def request(self, reason: str) -> None:
        """Safe from a signal handler or another thread: only sets fields the others poll."""
        if self.reason is None:
            self._at = self._clock()
            self.reason = reason

    def preempted(self) -> None:
        """GCE preempts this spot VM (``instance/preempted``): a shutdown whose jobs' grace is at most
        ``PREEMPTED_GRACE_S``, counted from the shutdown's request (a SIGTERM that came first included). Safe from
        another thread."""
        with self._cut:
            self._stop_grace_s = min(self._stop_grace_s, PREEMPTED_GRACE_S)
        self.request("preempted")

    def notice(self) -> None:
        """A host maintenance's notice came now (``zen.agent.__main__._maintenance``): GCE stops the VM within
        ``NOTICE_S``, a shutdown then told as host maintenance (``said``). Safe from another thread."""
        if self.noticed_at is None:
            self.noticed_at = self._clock()
        self.maintenance = True

    def before_start(self, vm: str, start: StartMessage, runtime_s: float | None = None) -> str | None:
        """Why an attempt whose job has not started is given back, not started, since a host maintenance's notice
        (PREEMPTED: Zen requeues it, no attempt spent: ``zen.core.gave_back``); None: no notice came, or its job
        surely ends before GCE's stop. It surely does when its ``max_runtime_s`` (``runtime_s``: what staging and the
        pull left of it), its stop grace once killed at it, as long again for its outputs' upload and checkpoint's
        last save when it has either (their budget: ``zen.agent.attempt.AttemptRunner._end``) and ``REPORT_S`` for
        its final report fit in what is left of ``NOTICE_S`` since the notice. Any other started there runs on a VM
        GCE stops under it: up to an hour of its GPUs' time lost, then its rerun elsewhere (a gang's node: the
        whole gang's attempt, on every node)."""
        if (at := self.noticed_at) is None:
            return None
        limit = start.max_runtime_s
        needs = None if limit is None else ((limit if runtime_s is None else runtime_s) + self._job_grace_s
                                            + (limit if start.outputs or start.checkpoint else 0) + REPORT_S)
        if needs is not None and self._clock() + needs <= at + NOTICE_S:
            return None
        return f"{gave_back.stopping_for_maintenance(vm)} before its job started"

    def power_off(self, reason: str, why: str) -> None:
        """A shutdown (``reason``: what the attempts' reports say) that ends with the VM's power-off
        (``zen.agent.leftover.fence_vm``, ``why`` its line) within ``POWER_OFF_S`` from now, its jobs given no grace,
        whatever shutdown was under way: a container left may run its job, and the fence's margin (15 s of Zen's
        deadline) is what keeps it from running beside the job's rerun elsewhere. Not from a signal handler."""
        now = self._clock()
        if self._at is None:
            self._at, self.reason = now, reason
        with self._cut:  # the deadline (``left``) no later than POWER_OFF_S from now: the stop grace cut to that
            self._stop_grace_s = min(self._stop_grace_s, now + POWER_OFF_S - SHUTDOWN_S - self._at)
        self.power_off_reason = why

    def said(self, vm: str, otherwise: str, cut: str | None = None) -> str:
        """What a report of an attempt the shutdown ended says of the VM: ``otherwise`` (its words for a shutdown, which
        Zen tells the job's user as its VM's preemption: ``zen.core.gave_back.shut_down``), but for a host maintenance,
        no preemption (of a standard VM, none could be), words of its own: Zen tells the user the job was requeued.
        ``cut``: the step the shutdown cut (a transfer, the image's pull), named after them ("... while <cut>")."""
        if not self.maintenance:
            return otherwise
        return gave_back.stopping_for_maintenance(vm) + (f" while {cut}" if cut else "")

    def cut(self, vm: str, what: str) -> str:
        """The words of a step (``what``: a transfer, the image's pull) the shutdown cut: "VM ... shut down while ..."
        (``zen.core.gave_back.shut_down``: a preemption), or a host maintenance's (``said``)."""
        return self.said(vm, f"VM {vm} shut down while {what}", what)

    @property
    def stopping(self) -> bool:
        return self.reason is not None

    def left(self, keep_s: float = 0.0) -> float:
        """Seconds left until the shutdown's deadline (``SHUTDOWN_S`` past the stop grace, from the
        request), less ``keep_s`` kept for the steps after; infinite while not shutting down."""
        if self._at is None:
            return math.inf
        return self._at + self._stop_grace_s + SHUTDOWN_S - keep_s - self._clock()

    def budget(self, keep_s: float) -> float:
        """One report's budget while shutting down: what is left before ``keep_s`` of the deadline, at most
        ``SHUTDOWN_BUDGET_S``, and one second at least (late is better than never; systemd has the last word)."""
        return min(SHUTDOWN_BUDGET_S, max(1.0, self.left(keep_s)))
