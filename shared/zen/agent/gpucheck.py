"""Whether a job's failure was the VM's (``vm_fault``): docker's (``zen.agent.container.docker_fault``), its work
disk's (``zen.agent.diskcheck``: read-only or failing), or its GPUs'
(``GpuCheck``: after a job's non-zero exit, ``nvidia-smi -L``, bounded, must list every GPU of the VM). A GPU fallen
off the bus (NVIDIA Xid 79, 48, ...) fails every job it is given at once, each with the job's own exit code and CUDA's
"unknown error" or "no CUDA-capable device is detected": the attempt is the VM's fault (PREEMPTED: requeued, no
attempt spent) and the VM retires, so it does not drain the queue job after job.

Where no ``nvidia-smi`` is found (the local stack's stand-in VMs, a VM without NVIDIA's driver), nothing is checked;
in local mode (``ZEN_AGENT_LOCAL=1``) only a command ``ZEN_AGENT_NVIDIA_SMI`` names is run. Nor, while it has listed
no GPU since the agent started (``GpuCheck.at_start``: the driver out of the agent's reach, or not yet), does an answer
listing none count; it runs after a job's success too until it lists one (``GpuCheck.after_success``).
The rules: docs/reference/agent.md, "a GPU that fails its check"."""

from __future__ import annotations

import logging
import subprocess
from typing import Callable

from zen.agent.container import docker_fault, fault_reason

log = logging.getLogger("zen.agent")

CHECK_TIMEOUT_S = 30.0  # ``nvidia-smi -L`` answers within a second on a sound VM; one hung in the driver is a fault
NVIDIA_SMI = "nvidia-smi"  # a VM's, unless ``ZEN_AGENT_NVIDIA_SMI`` names another
SAID_CHARS = 300  # of what the check printed, in the attempt's note


class GpuCheck:
    """``nvidia-smi -L`` run as ``command`` (None: nothing is checked), expected to list ``gpus`` GPUs."""

    def __init__(self, command: str | None, gpus: int, timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self.command, self.gpus, self.timeout_s = command, gpus, timeout_s
        self.reached = True  # whether the check has reached the GPUs (``at_start``): else listing none is no fault
        self.failed_at_start: str | None = None  # why it failed as the agent started, listing some GPUs (``at_start``)

    @classmethod
    def of(cls, command: str | None, local: bool, gpus: int) -> "GpuCheck":
        """The VM's check: ``command`` when given (``ZEN_AGENT_NVIDIA_SMI``), else ``nvidia-smi`` unless ``local``."""
        return cls(command or (None if local else NVIDIA_SMI), gpus)

    def __call__(self) -> str | None:
        """Why the VM's GPUs fail their check (its output, or its silence), or None: sound, not checkable here, or
        not reached yet (an answer listing none before any listed one: ``at_start``)."""
        said, listed = self._run()
        if listed:
            self.reached = True  # the driver answers the agent: from now on a GPU missing is the VM's fault
        elif said is not None and listed == 0 and not self.reached:
            log.warning("the GPUs' check lists none, as it did when the agent started: not the VM's fault",
                        extra={"command": self.command, "reason": said})
            return None
        return said

    def after_success(self) -> None:
        """After a job's exit 0: a check that has listed no GPU since the agent started (``at_start``) runs, to learn
        whether it reaches them now (the job's container made NVIDIA's device files). It ran only after a job's
        failure: on a VM whose jobs succeeded until a GPU fell off the bus it had never listed one, and each answer
        listing none from then on (a 1-GPU VM's, a driver gone) was no fault, job after job. Listing some, it is
        reached; else it runs again after the next success."""
        if not self.reached and self._run()[1]:
            log.info("the GPUs' check lists them after a job: a GPU missing from now on is the VM's fault",
                     extra={"command": self.command})
            self.reached = True

    def at_start(self) -> "GpuCheck":
        """This check, run once as the agent starts, before any job. One that answers listing no GPU at all is not
        reached: the driver out of the agent's reach (its devices not given to it, as a private /dev did), or not
        yet (a boot: NVIDIA's device files are made when a root process first opens the driver, as docker's GPU hook
        does at the first job, and the agent may not: it runs unprivileged). Until the check lists a GPU, an answer
        listing none is no fault: else every job's own failure would be taken for its VM's, each requeued and its
        VM retired, job after job (logged). Once it lists one, it checks as any other: a GPU lost after the boot is
        the VM's fault, which the check was blind to when it was given up at the start. One that fails listing some
        GPUs (fewer than the VM's: one missing at the boot, one whose Xid fails ``nvidia-smi``) is the VM's fault at
        once: ``failed_at_start`` says why, and the VM retires before it takes a job (``zen.agent.attempt``). Its
        first job was given that GPU-short VM: requeued when it failed, but charged when it hung until its
        ``max_runtime_s`` (no check after a timeout). One silent is reached, and checked after a job's failure."""
        if self.command is None or self.gpus <= 0 or (run := self._run())[0] is None:
            return self
        if run[1] == 0:
            log.error("the GPUs' check lists none before any job ran: not taken for the VM's fault until it lists one",
                      extra={"command": self.command, "reason": run[0]})
            self.reached = False
        elif run[1]:
            log.error("the GPUs' check fails before any job ran: the VM takes no job",
                      extra={"command": self.command, "reason": run[0]})
            self.failed_at_start = run[0]
        return self

    def _run(self) -> tuple[str | None, int | None]:
        """Why the check fails, or None; and how many GPUs it listed (None: it did not answer)."""
        if self.command is None or self.gpus <= 0:
            return None, None
        argv = [self.command, "-L"]
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        except OSError as exc:  # no nvidia-smi on this VM (or not runnable): nothing to check with
            log.warning("GPU check not run", extra={"command": self.command, "error": str(exc)})
            return None, None
        try:
            out, _ = process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()  # not waited for: one stuck in the driver may never end
            return f"`{' '.join(argv)}` did not answer within {self.timeout_s:g} s", None
        lines = [line.strip() for line in out.splitlines() if line.strip()]
        said = " | ".join(lines)[-SAID_CHARS:] or "(nothing)"
        listed = sum(1 for line in lines if line.startswith("GPU "))
        if process.returncode != 0:
            return f"`{' '.join(argv)}` failed (exit code {process.returncode}): {said}", listed
        if listed < self.gpus:
            return f"`{' '.join(argv)}` lists {listed} of the VM's {self.gpus} GPUs: {said}", listed
        return None, listed


def vm_fault(container: str | None, exit_code: int, tail: str, gpus: Callable[[], str | None],
             disk: Callable[[], str | None] = lambda: None) -> str | None:
    """Why a job's end was its VM's fault (the VM retires, the attempt is requeued free), or None: the job's own.
    Docker's failure first (``docker_fault``); else, for a non-zero exit, its work disk's check (``disk``:
    ``zen.agent.diskcheck.WorkDiskCheck``: read-only or failing), then the GPUs' (``gpus``: ``GpuCheck``)."""
    if (fault := docker_fault(container, exit_code, tail)) is not None:
        return fault_reason(fault)
    if exit_code == 0 or (found := _disk_then_gpus(gpus, disk, "a job failed", exit_code=exit_code)) is None:
        return None
    kind, why = found
    if kind == "disk":
        return f"the job exited with code {exit_code} on a VM whose disk failed: {why}"
    return f"the VM's GPUs failed their check after the job exited with code {exit_code}: {why}"


def stopped_fault(gpus: Callable[[], str | None], disk: Callable[[], str | None]) -> str | None:
    """Why a VM was at fault when its job's end was no exit of its own, or None: a gang's node's part Zen stopped (a
    peer's failure most often: its collectives broke when this VM's GPU fell off the bus, and its own command, hung on
    that GPU, had not exited yet), or a job killed at its ``max_runtime_s`` (hung on a GPU gone: it was FAILED, charged,
    and the VM took the next job). Its work disk's check, then its GPUs', whatever its exit code (a part stopped may
    exit 0). Without it the peer's failure ended the gang's attempt, spent (a retry of its ``max_retries`` too), and
    the VM, not retired, took the rerun's part: the VM's fault is the attempt's loss (PREEMPTED:
    ``zen.core.gang_ends.settle``), as after a job's own exit (``vm_fault``)."""
    if (found := _disk_then_gpus(gpus, disk, "a gang's part was stopped")) is None:
        return None
    kind, why = found
    return f"its disk failed: {why}" if kind == "disk" else f"its GPUs failed their check: {why}"


def _disk_then_gpus(gpus: Callable[[], str | None], disk: Callable[[], str | None], after: str,
                    **said: object) -> tuple[str, str] | None:
    """The VM's work disk's check, then its GPUs' (each logged as an ERROR when it fails, ``after`` what): ("disk" or
    "gpus", why it failed), or None."""
    if (refused := disk()) is not None:
        log.error(f"the VM's disk takes no writes after {after}", extra={**said, "reason": refused})
        return "disk", refused
    if (failed := gpus()) is not None:
        log.error(f"the VM's GPUs failed their check after {after}", extra={**said, "reason": failed})
        return "gpus", failed
    return None
