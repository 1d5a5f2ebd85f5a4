"""An attempt's way to its job's start, once its claim is confirmed (``Prestart.prepare``): its secrets read
(``zen.agent.secrets``), its inputs staged and its checkpoint restored (``zen.agent.staging``, ``zen.agent.checkpoint``,
in the background: ``zen.agent.transfer``), its image pulled (``zen.agent.imagepull``), a STOP that came meanwhile.
It ends with what to start (``Ready``) or how the attempt ended before its start (``Ended``: the job never ran,
nothing to upload), which ``zen.agent.attempt.AttemptRunner`` reports."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from zen.agent import fence, imagepull
from zen.agent.cache import InputCache
from zen.agent.checkpoint import Checkpoint
from zen.agent.container import Sandbox
from zen.agent.diskquota import DiskWatch
from zen.agent.identity import Identity
from zen.agent.limits import DailyPulls
from zen.agent.output import AttemptOutput
from zen.agent.reports import AttemptReport
from zen.agent.runner import JobSpec
from zen.agent.secrets import SecretsFailed, resolve
from zen.agent.settings import AgentSettings
from zen.agent.shutdown import Shutdown
from zen.agent.slots import ControlRouter, Key
from zen.agent.staging import AttemptData, Progress, Unavailable
from zen.agent.transfer import SHUTDOWN_JOIN_S, run_in_background
from zen.core.gang_records import node_env
from zen.core.models import AgentStatus, ControlAction, ControlMessage, OverLimit, StartMessage

# ``AttemptRunner._transfer``: (attempt, data, what, progress, work, unavailable=, limit_s=, over=, verdict=).
Transfer = Callable[..., "tuple[AgentStatus, str] | None"]
# ``AttemptRunner._listen``: (attempt, next_beat, message=, data=) -> the next beat, the control message if one came.
Listen = Callable[..., "tuple[float, ControlMessage | None]"]


@dataclass(frozen=True)
class Ready:
    """An attempt ready to start: its ``spec`` (with what staging and the pull left of its ``max_runtime_s``), its
    directory and checkpoint, ``limit``: its ``max_runtime_s`` as the start gave it (its outputs' budget too), and
    ``over``: the note of its job killed past it (``imagepull.killed_note``)."""

    spec: JobSpec
    data: AttemptData | None
    checkpoint: Checkpoint | None
    limit: int | None
    over: str


@dataclass(frozen=True)
class Ended:
    """An attempt that ended before its job started: its status and note (``data``: its directory, if any)."""

    status: AgentStatus
    note: str
    data: AttemptData | None = None
    over_limit: OverLimit | None = None


class Prestart:
    """Takes each confirmed attempt to its job's start (``prepare``), in the thread that claimed it."""

    def __init__(self, identity: Identity, settings: AgentSettings, controls: ControlRouter, pulls: DailyPulls,
                 cache: InputCache, sandbox: Sandbox, shutdown: Shutdown, clock: Callable[[], float],
                 log: logging.LoggerAdapter[logging.Logger], *, local: bool, read_secret: Callable[[str], bytes],
                 disk: DiskWatch | None, transfer: Transfer, listen: Listen) -> None:
        self._identity, self._settings, self._controls, self._pulls = identity, settings, controls, pulls
        self._cache, self._sandbox, self._shutdown, self._clock = cache, sandbox, shutdown, clock
        self._log, self._local, self._disk = log, local, disk
        self._read_secret = read_secret  # (a secret version's payload: adapters.secret_manager)
        self._transfer, self._listen = transfer, listen  # heartbeating the attempt meanwhile

    def prepare(self, start: StartMessage, attempt: AttemptReport, gpu_ids: tuple[int, ...],
                output: AttemptOutput) -> Ready | Ended:
        """The attempt's secrets, inputs, checkpoint and image, in that order; ``Ended`` once one of them, its
        ``max_runtime_s``, the VM's shutdown, the fence or a STOP ended it (STOPPED: one came before its start), or a
        host maintenance's notice that came before its job's start, looked at before the first and after the last
        (PREEMPTED: ``Shutdown.before_start``; a long staging may cross the notice)."""
        if (noticed := self._shutdown.before_start(self._identity.vm, start)) is not None:
            return Ended(AgentStatus.PREEMPTED, noticed)  # nothing read nor staged yet
        secrets = self._secrets(start, attempt, output)
        if isinstance(secrets, Ended):  # the job never ran, nor staged anything
            return secrets
        settings, key, limit = self._settings, (start.job_id, start.attempt), start.max_runtime_s
        data = self._attempt_data(start, attempt.gang.rank if attempt.gang else None)
        checkpoint = self._checkpoint(start, data, output, attempt.gang.rank if attempt.gang else None)
        runtime, counted = (None if limit is None else float(limit)), list[str]()  # counted: staging's, the pull's
        if data.scratch_only:  # nothing to stage: its scratch directory alone
            if (failed := self._scratch(key, data)) is not None:
                return failed
        else:
            staged = self._stage(attempt, key, data, checkpoint, limit, runtime, counted)
            if isinstance(staged, Ended):  # the job never ran: nothing to upload
                return staged
            runtime = staged
        spec = JobSpec(job_id=start.job_id, attempt=start.attempt, command=start.command, image=start.image,
                       env={**start.env, **(node_env(attempt.gang) if attempt.gang else {})}, max_runtime_s=runtime,
                       gang_node=attempt.gang is not None, stop_grace_s=settings.stop_grace_s,
                       data_dirs={**data.env(), **(checkpoint.env() if checkpoint else {})},
                       gpu_ids=gpu_ids or None,  # (): the VM runs one job at a time, the job sees every GPU
                       sandbox=self._sandbox,  # its container's confinement (zen.agent.container)
                       secret_env=secrets)
        pulled = None if self._local else imagepull.pull(
            spec, settings, self._identity.vm, self._clock, listen=lambda *a, **kw: self._listen(attempt, *a, **kw),
            stopping=lambda: self._shutdown.stopping,
            fenced=lambda: fence.fenced(attempt, settings, self._clock(), imagepull.WHAT),
            max_runtime_s=limit, spent=counted, said=lambda line: output.add("zen", line),
            shut_down=lambda step: self._shutdown.cut(self._identity.vm, step))
        if isinstance(pulled, imagepull.PullCut):  # its image's pull ended the attempt (zen.agent.imagepull)
            if pulled.retire is not None:  # it stalled: as a pull the network cut short (zen.agent.container.PULL_CUT)
                self._pulls.retire(pulled.retire)
            return Ended(pulled.status, pulled.note, data=data, over_limit=pulled.over_limit)
        if pulled and runtime and pulled.max_runtime_s:  # the pull's share of it
            counted.append(f"pulling its image took {runtime - pulled.max_runtime_s:.1f} s")
        spec, over = pulled or spec, imagepull.killed_note(limit, counted)
        if (stop := self._controls.stop_waiting(key)) is not None:  # come while it read secrets, before its start
            return Ended(AgentStatus.STOPPED, f"zen: stopped before it started ({stop})", data=data)
        if (noticed := self._shutdown.before_start(self._identity.vm, start, spec.max_runtime_s)) is not None:
            return Ended(AgentStatus.PREEMPTED, noticed, data=data)  # come while it staged or pulled
        return Ready(spec, data, checkpoint, limit, over)

    def _stage(self, attempt: AttemptReport, key: Key, data: AttemptData, checkpoint: Checkpoint | None,
               limit: int | None, runtime: float | None, counted: list[str]) -> Ended | float | None:
        """Its inputs staged and its checkpoint restored, while it heartbeats: what is left of its ``max_runtime_s``
        (``runtime``, less their time when they are counted: said in ``counted``), or how the attempt ended."""
        began, restored = time.monotonic(), Progress()  # restored: the checkpoint's own count (never ``staged``)

        def stage() -> None:
            data.prepare()
            if self._disk is not None:  # measured from now: staging fills the disk too
                self._disk.add(key, data.root)
            data.stage()
            if checkpoint is not None:  # restored before the job runs (zen.agent.checkpoint)
                checkpoint.prepare()
                checkpoint.restore(restored, data.cancel)

        staged = "inputs" if data.inputs or checkpoint is None else "checkpoint"  # a checkpoint alone: restored
        moved = data.staged if staged == "inputs" else restored  # the inputs' count is not the checkpoint's
        cut = self._transfer(attempt, data, f"staging {staged}", moved, stage, limit_s=limit,
                             unavailable=f"zen: VM {self._identity.vm} could not stage the job's {staged} (requeued)",
                             over=(late := f"zen: staging exceeded max_runtime_s={limit}"),
                             verdict=lambda: self._disk.verdict(key) if self._disk else None)
        if cut is None or (fault := data.disk_fault or (checkpoint.disk_fault if checkpoint else None)) is not None:
            self._pulls.staged(None if cut is None else fault)  # a worn disk retires the VM (zen.agent.limits)
        elif (token := data.token_fault or (checkpoint.token_fault if checkpoint else None)) is not None:
            self._pulls.staged(token, of="credentials")  # as its own token refused does (inputs or the checkpoint's)
        if cut is not None:  # the job never ran: nothing to upload
            return Ended(*cut, data=data, over_limit="max_runtime_s" if cut[1].startswith(late) else None)
        if limit is not None and (data.inputs or checkpoint is not None):  # staged or restored: counted
            runtime = limit - (staged_s := time.monotonic() - began)
            counted.append(f"staging its {staged} took {staged_s:.1f} s")
            if runtime <= 0:  # done just past it, between two looks; stopped at its limit: never retried nor rerun
                return Ended(AgentStatus.FAILED, f"{late} ({moved.describe()} done)", data=data,
                             over_limit="max_runtime_s")
        return runtime

    def _scratch(self, key: Key, data: AttemptData) -> Ended | None:
        """The directory of an attempt with no data to stage (its ``ZEN_SCRATCH_DIR``), in its disk share;
        ``Ended`` (PREEMPTED: the VM's disk) when it cannot be made. Counted as a staging is, made or not: made, it
        breaks the disk's faults in a row (else the VM retired for three faults a working attempt stood between)."""
        try:
            data.prepare()
        except Unavailable as exc:
            self._pulls.staged(data.disk_fault)  # a worn disk retires the VM (zen.agent.limits)
            return Ended(AgentStatus.PREEMPTED, f"zen: VM {self._identity.vm} could not prepare the job's "
                                                f"directory (requeued): {exc}", data=data)
        self._pulls.staged(None)
        if self._disk is not None:
            self._disk.add(key, data.root)
        return None

    def _secrets(self, start: StartMessage, attempt: AttemptReport, output: AttemptOutput) -> dict[str, str] | Ended:
        """The job's secrets, read before anything of it runs, and hidden in its output from the first line; ``Ended``
        when one cannot be read (``zen.agent.secrets``), a STOP came (STOPPED), the fence fell or the VM shuts down
        (PREEMPTED). Read in the background while the attempt heartbeats, as a staging is: the reads may take
        ``secrets.BUDGET_S`` and one more read's timeout (40 s), longer than a ``heartbeat_timeout_s`` the
        configuration allows: an attempt silent so long would be taken for lost (an attempt spent) and run elsewhere."""
        if not start.secrets:
            return {}
        references, key, what = start.secrets, (start.job_id, start.attempt), "reading its secrets"
        read: dict[str, dict[str, str]] = {}
        cut: list[tuple[AgentStatus, str]] = []
        stop: list[str] = []  # the reason of a STOP that came meanwhile
        cancel, next_beat = threading.Event(), self._clock() + self._settings.heartbeat_s

        def pause(seconds: float) -> None:  # between tries: a cut read tries no more
            if cancel.wait(seconds):
                raise _Cancelled

        def one(reference: str) -> bytes:  # nor reads the next secret: the attempt ended (left to end by itself)
            if cancel.is_set():
                raise _Cancelled
            return self._read_secret(reference)

        def work() -> None:
            read["values"] = resolve(references, one, sleep=pause)

        def tick() -> bool:
            nonlocal next_beat
            if self._shutdown.stopping:
                cut.append((AgentStatus.PREEMPTED, f"zen: {self._shutdown.cut(self._identity.vm, what)}"))
            elif (note := fence.fenced(attempt, self._settings, self._clock(), what)) is not None:
                cut.append((AgentStatus.PREEMPTED, note))
            else:
                next_beat, order = self._listen(attempt, next_beat, message=f"zen: {what}")
                if order is not None and order.action is ControlAction.STOP:
                    stop.append(order.reason or "stop requested")
            return bool(cut or stop)

        error = run_in_background(work, tick, cancel, SHUTDOWN_JOIN_S)
        if error is not None and not isinstance(error, (SecretsFailed, _Cancelled)):
            raise error  # (not the service's nor the reference's: the agent's own)
        failed = error if isinstance(error, SecretsFailed) else None
        if failed is not None:
            self._log.error("job secrets not read", extra={"job_id": start.job_id, "attempt": start.attempt,
                                                           "status": failed.status.value, "reason": failed.note})
            output.add("zen", failed.note)
            if failed.vm_fault is not None:  # its own token refused: retires the VM as a worn disk does
                self._pulls.staged(failed.vm_fault, of="credentials")
            # STOPPED if a STOP came meanwhile
            return Ended(*failed.stopped(stop[0] if stop else self._controls.stop_waiting(key)))
        if stop:  # the job never ran and its user stopped it (its read, if still under way, left to end by itself)
            return Ended(AgentStatus.STOPPED, f"zen: stopped before it started ({stop[0]})")
        if cut:  # the fence fell, or the VM shuts down
            self._log.error(f"{what} cut", extra={"job_id": start.job_id, "attempt": start.attempt,
                                                  "status": cut[0][0].value, "reason": cut[0][1]})
            return Ended(*cut[0])
        values = read["values"]
        output.hide(list(values.values()))
        return values

    def _checkpoint(self, start: StartMessage, data: AttemptData | None, output: AttemptOutput,
                    node: int | None) -> Checkpoint | None:
        return None if start.checkpoint is None or data is None else Checkpoint(
            start.checkpoint, data.root, start.attempt, data.client, say=lambda line: output.add("zen", line),
            node=node)

    def _attempt_data(self, start: StartMessage, node: int | None) -> AttemptData:
        """Every attempt's directory: its scratch directory, and its inputs and outputs when it has data."""
        return AttemptData(start.job_id, start.attempt, list(start.inputs or []), start.outputs,
                           Path(self._settings.work_dir), project=self._identity.project, cache=self._cache,
                           node=node, share=self._disk and self._disk.share,
                           scratch_only=not start.inputs and not start.outputs and start.checkpoint is None)


class _Cancelled(Exception):
    """A secrets' read cut (a STOP, the fence, the VM's shutdown): it tries no more, nor reads another secret."""
