"""A job's container that docker could not remove once the job ended or was stopped (its daemon hung or
failing) may still run the job. Its final report then waits: the attempt goes on reporting RUNNING, as it
may be, while the agent tries the removal again every ``RETRY_S``, so Zen reruns nothing beside it (a
stopped attempt's rerun waits while its VM says it runs: ``zen.core.lifecycle``, ``zen.core.gang``). The
report goes once the container is gone. A job the agent stopped (a stop, a queue's preemption) or a fence stopped
(``zen.agent.fence``, or the job's supervisor: ``zen.agent.launch``) retires the VM at once (``zen.agent.agent``:
its slot is never another job's, and it takes no other): Zen reruns a fenced attempt without waiting for its
report, and a stopped one once its VM is silent, maybe here in another slot, beside the container; and Zen deletes
the retired VM, the container with it, instead of billing it while it waits. Past ``WAIT_S`` a job that ended on
its own, or a fenced one, is reported, with a note saying its container is left, and the VM retires (if not yet);
one the agent stopped is not reported at all (:func:`hold`). One whose end docker lost (its daemon failed under the
job, which may run on) is reported PREEMPTED so too, and the VM is then powered off (:func:`after_report`). Not while
the VM shuts down: it is going, and the container with it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, Protocol

from zen.agent.fencefile import add_reason
from zen.agent.removal import may_run
from zen.agent.shutdown import POWER_OFF_S
from zen.core.reports import LEFT_RUNNING

if TYPE_CHECKING:
    from zen.agent.limits import DailyPulls
    from zen.agent.settings import AgentSettings
    from zen.agent.shutdown import Shutdown
    from zen.agent.slots import Slots
    from zen.agent.vmbeat import VmBeats

log = logging.getLogger("zen.agent")

WAIT_S = 300.0  # how long the final report of a job not stopped by the agent waits for a container that may still run
RETRY_S = 10.0  # between two removals tried (each ``docker rm -f``, bounded by ``zen.agent.removal``)
ROUND_S = 1.0  # the least time one round of heartbeat and orders takes (its orders are ignored: it has ended)
RUNNING_NOTE = LEFT_RUNNING  # what the attempt says meanwhile: Zen deletes a retired VM whose stopping job says it


class Removable(Protocol):
    container_gone: bool | None

    def remove_container(self, budget_s: float = ...) -> None: ...


def left_reason(key: tuple[str, int]) -> str:
    """Why the VM takes no more jobs once an attempt's container could not be removed (``DailyPulls.retire``)."""
    return f"the container of {key[0]} attempt {key[1]} could not be removed"


class Retire(Protocol):
    def __call__(self, fenced: bool, why: str | None = None) -> None: ...


def retirer(pulls: DailyPulls, vm_beats: VmBeats, key: tuple[str, int], settings: AgentSettings | None = None,
            container: str | None = None, shutdown: Shutdown | None = None,
            slots: Slots | None = None) -> Retire:
    """What :func:`hold` retires the VM by (no more jobs, RETIRED said now: the loop may be the attempt's own thread,
    with one slot); ``retire(True)``, for an attempt the fence stopped, powers the VM off too (:func:`fence_vm`)
    while its ``container`` may still run (docker cannot say it does not: one it killed but cannot remove runs no
    more, and the VM's other jobs run on); ``settings``: where to ask for it (``fence_file``), and docker. A VM with
    other attempts in its ``slots`` (running, or claimed) shuts down first (``Shutdown.power_off``): each is reported
    PREEMPTED, requeued at once without spending an attempt, and the loop powers the VM off then (``zen.agent.agent``);
    powered off at once, they went silent, and Zen ran them again only once the sweep took them for lost, each
    spending an attempt. ``why``: the power-off's line (by default, a fenced attempt's)."""
    fence_file, docker = (settings.fence_file, settings.docker) if settings is not None else (None, "docker")

    def retire(fenced: bool, why: str | None = None) -> None:
        pulls.retire(left_reason(key))
        if fenced and fence_file and (container is None or may_run(container, docker)):
            why = why or (f"the container of {key[0]} attempt {key[1]}, whose lease ran out, may still run (docker "
                          "could not remove it, nor say it stopped): Zen runs the job again elsewhere")
            if shutdown is not None and slots is not None and (
                    slots.claiming() or any(held != key for held in slots.held())):
                shutdown.power_off(f"powered off: {left_reason(key)}", why)
            else:
                fence_vm(fence_file, why)
        vm_beats.retire()
        vm_beats.beat(force=True)
    return retire


def after_report(job: Removable, key: tuple[str, int], retire: Retire, stopping: Callable[[], bool], *,
                 unknown: bool, reported: bool, lost: bool) -> None:
    """Once the final report of an attempt whose end is ``unknown`` (docker lost its container while the job ran:
    ``zen.agent.container.lost_while_running``) went past ``WAIT_S`` (``reported``) with its container left: power the
    VM off (``retire(True)``: when docker cannot say the container stopped; other attempts here reported PREEMPTED
    first), as the job may run on in it. Zen requeues the attempt at once and may start it on another VM; left on,
    retired, this VM lived until Zen's next scaling pass deleted it, the job running twice meanwhile. After the
    report, not before: powered off first, the attempt went silent, and Zen ran the job again only once the sweep
    took it for lost, spending an attempt. Not for a ``lost`` one (fenced: powered off before its wait, ``hold``),
    a job that ended on its own (its exit code known: its container runs no more), nor while the VM shuts down."""
    if unknown and reported and not lost and job.container_gone is False and not stopping():
        retire(True, f"the container of {key[0]} attempt {key[1]}, whose job's end docker lost (its daemon failed "
                     "while the job ran), may still run (docker could not remove it, nor say it stopped): Zen runs "
                     "the job again elsewhere")


def fence_vm(path: str, reason: str) -> None:
    """Power the VM off: a job's container docker cannot kill would run on beside the job's rerun elsewhere. The
    agent runs unprivileged; writing ``path`` (``AgentSettings.fence_file``, in its runtime folder, which a reboot
    empties) starts the startup script's root unit, ``zen-fence.service``, which powers the VM off at once (the
    MIG then recreates it). The supervisor does the same when the agent cannot (``launch.py``)."""
    try:
        add_reason(path, reason)
    except OSError as exc:
        log.error("cannot ask for this VM's power-off", extra={"path": path, "reason": reason, "error": str(exc)})
        return
    log.error("this VM is powered off", extra={"reason": reason})


class PowerOffAtStart:
    """The VM's power-off the agent asks for as it starts (``zen.agent.__main__``: a container an earlier agent left,
    which docker cannot remove, may run its job): asked for (:func:`fence_vm`, once) when :meth:`now` is called, once
    the earlier agent's other attempts, their containers gone, are reported (``Agent.run``, ``zen.agent.restart``),
    and ``POWER_OFF_S`` after it was decided at most, whatever the agent does then (a report waiting for Pub/Sub, a
    read that fails and ends the agent): a timer asks for it then. Asked for first thing, it went before those
    reports, and Zen ran their jobs again only once the sweep took them for lost, each spending an attempt."""

    def __init__(self, path: str, why: str, within_s: float = POWER_OFF_S) -> None:
        self.path, self.why = path, why
        self._lock = threading.Lock()
        self._asked = False
        self._timer = threading.Timer(within_s, self.now)
        self._timer.daemon = True
        self._timer.start()

    def now(self) -> None:
        """Ask for the power-off now, unless it was asked for already (the timer, or the agent)."""
        with self._lock:
            if self._asked:
                return
            self._asked = True
        self._timer.cancel()
        fence_vm(self.path, self.why)


def hold(job: Removable, note: str | None, beat: Callable[[float], float], clock: Callable[[], float],
         stopping: Callable[[], bool], retire: Callable[[bool], None] | None = None, *, stopped: bool = False,
         lost: bool = False, lease_out: Callable[[], bool] = lambda: False,
         sleep: Callable[[float], None] = time.sleep) -> tuple[str | None, bool]:
    """Wait while ``job``'s container may run (``container_gone`` False), ``beat(next_beat)`` sending the
    attempt's RUNNING heartbeat when due (returns the next time one is due) and taking its orders. Returns the final
    report's ``note``, with what happened to the container added when there is something to say, and whether the
    report goes at all.

    ``retire``: what retires the VM. ``lost``: the job a fence stopped, the agent's or its supervisor's (the
    attempt's lease fell: Zen takes it for lost, or soon will, and reruns the job, which this VM, running several
    at once, might pull). ``stopped``: a job the agent stopped (docker could not kill it: it may run on), which Zen
    may rerun once it hears the stop answered (a queue's preemption, a gang's lost node) or its VM silent. Either
    retires the VM at once, before the wait: it takes no other job beside the container, and a stopped job's VM
    (its job stopping, saying ``RUNNING_NOTE``) is deleted by Zen, the container with it (``zen.store.fleet.held_vms``).
    A stopped job's wait goes on until the container is gone (its report goes then) or the VM shuts down, and then
    no final report goes (False): Zen reruns the job once its VM has been silent ``preempted_stop_s``
    (``zen.core.silence.decide_silence``), gone, not while it may still run it. Any other job's report goes after
    ``WAIT_S`` (a fenced one's, or one that ended on its own: its exit code known, its container runs no more; its
    VM retires then, ``zen.agent.agent``). A stopped job whose attempt's lease runs out while it waits (``lease_out``:
    none of its reports reached Zen, which reruns a job its queue took back once its VM is silent) has the VM
    powered off, as a fenced one does (``retire(True)``)."""
    if job.container_gone is not False:
        return note, True
    if (lost or stopped) and retire is not None and not stopping():  # (a rerun in another slot would run beside it)
        retire(lost)  # a fenced one's VM powered off too: Zen reruns it without waiting to hear from this VM
    said, report = _wait(job, beat, clock, stopping, WAIT_S, sleep, retire if stopped else None, lease_out)
    return (note if said is None else f"{note}\n{said}" if note else said), report


def _wait(job: Removable, beat: Callable[[float], float], clock: Callable[[], float], stopping: Callable[[], bool],
          wait_s: float, sleep: Callable[[float], None], retire: Callable[[bool], None] | None,
          lease_out: Callable[[], bool]) -> tuple[str | None, bool]:
    """``retire``: a stopped job's VM's (None: not stopped): its wait lasts until the container is gone, and the VM is
    powered off once the attempt's lease runs out meanwhile (``retire(True)``)."""
    began, fenced = clock(), False
    next_beat, next_try = began, began + RETRY_S
    while job.container_gone is False and not stopping() and (retire is not None or clock() - began < wait_s):
        round_began = clock()
        next_beat = beat(next_beat)
        if retire is not None and not fenced and lease_out():  # Zen may rerun the job elsewhere
            retire(True)
            fenced = True
        if clock() >= next_try:
            job.remove_container(RETRY_S)
            next_try = clock() + RETRY_S
        sleep(max(0.0, ROUND_S - (clock() - round_began)))
    if job.container_gone:
        return f"zen: the job's container was removed {clock() - began:.0f} s after the job ended (docker failed before)", True
    if retire is not None:  # the VM shuts down: the container goes with it, and Zen reruns nothing before
        return ("zen: the job's container could not be removed and may have run until this VM shut down; no final "
                "report: Zen ends the attempt once the VM is silent"), False
    return (None if stopping() else f"zen: the job's container could not be removed within {wait_s:.0f} s: it may "
            "still run; this VM takes no more jobs and is deleted"), True
