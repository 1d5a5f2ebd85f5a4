"""One attempt's life on the VM once its claim is confirmed (``AttemptRunner``): prepare it (``zen.agent.prestart``:
its secrets, its inputs staged and checkpoint restored, its image pulled), run it (``zen.agent.runner``), supervise
it (RUNNING heartbeats, the orders its control messages bring, the VM's shutdown, the fence: ``zen.agent.fence``,
its share of the disk: ``zen.agent.diskquota``), ship its output (``zen.agent.output``), upload its outputs and
report how it ended; and the upload and report of an attempt whose job ended under an agent that died (``resume``:
``zen.agent.resume``)."""

from __future__ import annotations

import logging
import threading
from typing import Callable, Mapping

from zen.adapters.joblogs import Sink
from zen.agent import fence, leftover, resume
from zen.agent.cache import InputCache
from zen.agent.checkpoint import Checkpoint
from zen.agent.container import Sandbox, lost_while_running
from zen.agent.diskcheck import WorkDiskCheck
from zen.agent.diskquota import DiskWatch
from zen.agent.gpucheck import GpuCheck, stopped_fault, vm_fault
from zen.agent.identity import Identity
from zen.agent.lastsave import UPLOAD_GRACE_S, save_last
from zen.agent.limits import DailyPulls
from zen.agent.output import AttemptOutput
from zen.agent.prestart import Ended, Prestart, Ready
from zen.agent.reports import FINAL_BUDGET_S, AttemptReport, Reporter
from zen.agent.runner import CannotRun, RunningJob
from zen.agent.settings import AgentSettings
from zen.agent.shutdown import SHUTDOWN_BUDGET_S, SHUTDOWN_S, SLICE_S, Shutdown
from zen.agent.slots import ControlRouter, Key, Slots
from zen.agent.staging import AttemptData, Progress
from zen.agent.transfer import transfer
from zen.agent.vmbeat import VmBeats
from zen.core.lease import STOP_REPORT_S
from zen.core.models import AgentStatus, ControlAction, ControlMessage, OverLimit, StartMessage
from zen.core.stops import answer_within, made_at, moves, preempts
from zen.core.text import escape_unstorable

OUTPUT_BUDGET_S = 20.0  # shipping the rest of a job's output before its final report (heartbeat timeout: 120 s)
SHUTDOWN_OUTPUT_S = 2.0  # kept, after an upload cut short, for the rest of the job's output
SHUTDOWN_REPORT_S = STOP_REPORT_S - SHUTDOWN_OUTPUT_S  # kept, after that, for the final report (zen.core.lease)
PREFACE_CHARS = 1100  # zen's lines before the output tail in the final report (Heartbeat.message: 8192)


class AttemptRunner:
    """Runs each confirmed attempt in the thread that claimed it (``run``), and counts those that ended."""

    def __init__(self, identity: Identity, settings: AgentSettings, reporter: Reporter, controls: ControlRouter,
                 vm_beats: VmBeats, slots: Slots, pulls: DailyPulls, cache: InputCache, sandbox: Sandbox,
                 shutdown: Shutdown, clock: Callable[[], float], log: logging.LoggerAdapter[logging.Logger], *,
                 local: bool, sink: Sink | None, base_env: Mapping[str, str] | None,
                 read_secret: Callable[[str], bytes], disk: DiskWatch | None = None) -> None:
        self._identity, self._settings, self._reporter, self._controls = identity, settings, reporter, controls
        self._vm_beats, self._slots, self._pulls, self._cache = vm_beats, slots, pulls, cache
        self._shutdown, self._clock, self._log, self._local = shutdown, clock, log, local
        self._sink = sink  # where job output goes (zen.adapters.joblogs); None: only the tail in the final report
        self._base_env = base_env
        self._disk = disk  # each running attempt's directory against its share of the disk; None: unwatched
        self._gpus = GpuCheck.of(settings.nvidia_smi, local, slots.capacity.gpus).at_start()  # after a job's failure
        if self._gpus.failed_at_start is not None:  # a GPU missing already: no job is given to this VM
            pulls.retire(f"the VM's GPUs failed their check as the agent started: {self._gpus.failed_at_start}")
        self.work_disk = WorkDiskCheck(settings.work_dir)  # after a job's failure too: read-only or failing
        self.jobs_run, self._lock = 0, threading.Lock()  # (the lock: jobs_run, from every attempt's thread)
        self._prestart = Prestart(identity, settings, controls, pulls, cache, sandbox, shutdown, clock, log,
                                  local=local, read_secret=read_secret, disk=disk, transfer=self._transfer,
                                  listen=self._listen)  # secrets, staging, the pull: up to the job's start

    def run(self, start: StartMessage, attempt: AttemptReport, gpu_ids: tuple[int, ...]) -> bool | None:
        """Prepare the attempt (``zen.agent.prestart``), start its job, supervise it, end it (``_end``). Returns
        whether the job's container is known gone (``RunningJob.container_gone``; None when no run got that far,
        or removal was not tried): ``Agent._hold`` checks again only then."""
        key = (start.job_id, start.attempt)
        if attempt.accepted_at is None:  # (else the Claimer's)
            attempt.accepted_at = self._clock()
        self._slots.running(key)
        self._vm_beats.beat(force=True)
        self._pulls.began(key, len(gpu_ids) if gpu_ids else None)
        if self._disk is not None:  # its disk before it wrote or pulled anything (``DiskWatch.failed_full``)
            self._disk.began(key)
        output = AttemptOutput(start.job_id, start.attempt, self._identity.vm, self._sink, self._settings.output,
                               self._settings.tail_bytes)
        try:
            ready = self._prestart.prepare(start, attempt, gpu_ids, output)
        except BaseException:  # its mark as begun goes: else every later attempt ran beside it (``failed_full``)
            if self._disk is not None:
                self._disk.remove(key)
            raise
        if isinstance(ready, Ended):  # the job never ran: nothing to upload
            self._end(attempt, output, None, ready.status, ready.note, data=ready.data, over_limit=ready.over_limit)
            return None
        if (job := self._start(start, attempt, output, ready)) is None:
            return None
        final, note = self._supervised(job, attempt, output, ready)
        self._conclude(start, attempt, output, ready, job, final, note)
        return job.container_gone

    def _start(self, start: StartMessage, attempt: AttemptReport, output: AttemptOutput,
               ready: Ready) -> RunningJob | None:
        """The job started; None when it cannot run here (``CannotRun``): FAILED, exit code 127, reported."""
        settings = self._settings
        try:
            return RunningJob.start(ready.spec, local=self._local, tail_bytes=settings.tail_bytes,
                                    docker=settings.docker, output=output, limits=settings.output,
                                    base_env=self._base_env, lease_s=fence.fence_left(attempt, settings, self._clock()),
                                    fence_file=settings.fence_file)
        except CannotRun as exc:
            self._log.error("job cannot run here", extra={"job_id": start.job_id, "attempt": start.attempt,
                                                          "reason": str(exc)})
            output.add("zen", f"zen agent: {exc}")
            self._end(attempt, output, 127, AgentStatus.FAILED, f"zen agent: {exc}", data=ready.data, upload=True,
                      limit_s=ready.limit, checkpoint=ready.checkpoint)
            return None

    def _supervised(self, job: RunningJob, attempt: AttemptReport, output: AttemptOutput,
                    ready: Ready) -> tuple[AgentStatus | None, str | None]:
        """``_supervise`` from the job's start: nothing may leave it running unsupervised. On an error the job is
        stopped, its attempt reported PREEMPTED and its directory removed before the error goes on."""
        spec, data, checkpoint, key = ready.spec, ready.data, ready.checkpoint, (attempt.job_id, attempt.attempt)
        try:  # (the command logged, not the argv: env values, -e K=V, may be credentials)
            self._log.info("job started", extra={
                "job_id": attempt.job_id, "attempt": attempt.attempt, "pid": job.pid, "container": job.launch.container,
                "command": spec.command, "image": spec.image, "gpu_ids": spec.gpu_ids})
            if checkpoint is not None:
                checkpoint.start_periodic()  # in its own thread: never in the heartbeats' way
            return self._supervise(job, attempt, ready.over, checkpoint.notice if checkpoint else None)
        except BaseException:
            job.stop(self._settings.stop_grace_s)  # never leave a job running unsupervised
            if checkpoint is not None:
                checkpoint.close()  # before the report: a rerun may restore from then on
            self._close_output(output, "zen agent error; the attempt was stopped", SHUTDOWN_BUDGET_S)
            self._reporter.job(attempt, AgentStatus.PREEMPTED, budget_s=SHUTDOWN_BUDGET_S,
                               message="zen agent error; the attempt was stopped")
            if data is not None:
                data.cleanup()
            if self._disk is not None:
                self._disk.remove(key)
            raise

    def _conclude(self, start: StartMessage, attempt: AttemptReport, output: AttemptOutput, ready: Ready,
                  job: RunningJob, final: AgentStatus | None, note: str | None) -> None:
        """How the job ended (``final``: the agent's verdict, if any; else its exit code; the VM's fault or its
        disk's), its container waited for while it may run (``zen.agent.leftover``), then its end (``_end``)."""
        settings, data, checkpoint, limit = self._settings, ready.data, ready.checkpoint, ready.limit
        key, spec = (start.job_id, start.attempt), ready.spec
        fields = {"job_id": start.job_id, "attempt": start.attempt}
        outcome, timed_out = job.outcome(), final is AgentStatus.FAILED and note == ready.over  # at max_runtime_s
        stopped = final is AgentStatus.STOPPED  # at Zen's word (an end the VM's fault made PREEMPTED: still stopped)
        container = None if outcome.ran else job.launch.container  # (its own 125: docker's words in it are the job's)
        if final is None and (why := vm_fault(container, outcome.exit_code, outcome.tail, self._gpus, self.work_disk)):
            self._pulls.retire(why)  # the VM's: docker's, its disk's, its GPUs' (zen.agent.gpucheck); it retires
            final, note = AgentStatus.PREEMPTED, f"zen: {why} (requeued; VM {self._identity.vm} takes no more jobs)"
        elif stopped and attempt.gang is not None and (why := stopped_fault(self._gpus, self.work_disk)):
            self._pulls.retire(f"at fault as a gang's part was stopped: {why}")  # the peer's failure: likely its doing
            final, note = AgentStatus.PREEMPTED, f"zen: VM {self._identity.vm} was at fault as its part stopped: {why}"
        elif timed_out and (why := stopped_fault(self._gpus, self.work_disk)):  # hung on a GPU gone, most likely
            self._pulls.retire(f"at fault as a job ran out of its max_runtime_s: {why}")
            final = AgentStatus.PREEMPTED
            note = f"zen: VM {self._identity.vm} was at fault as the job ran out of time: {why}"
        elif job.launch.container and spec.image and outcome.exit_code != 125:  # (125: docker failed, maybe its pull)
            self._cache.ran_image(spec.image)  # the image is on this VM now (zen.agent.runner.plan_launch)
        if final is None and outcome.exit_code == 0:
            self._gpus.after_success()  # a check that listed no GPU at the start learns whether it reaches them now
        if final is None and outcome.exit_code and self._disk and (
                full := self._disk.failed_full(key, outcome.tail, self._pulls.retire)):
            final, note = AgentStatus.PREEMPTED, f"zen: {full} (requeued)"  # not its own failure (zen.agent.diskquota)
        # Its exit code decides: an agent restarted resumes its upload.
        exited = None if final else resume.base(start, attempt)
        if not final:
            final, note = AgentStatus.FAILED if outcome.exit_code else AgentStatus.SUCCEEDED, outcome.note
        self._log.info("job ended", extra={**fields, "status": final.value, "exit_code": outcome.exit_code,
                                           "elapsed_s": round(job.elapsed_s(), 3), "pid": job.pid})
        # Stopped for the disk: nothing uploaded, its directory goes at once, its neighbours' space back
        # (not rerun: FAILED).
        spent = self._disk is not None and note is not None and note == self._disk.verdict(key)
        if spent and checkpoint is not None:
            checkpoint.stop_periodic(0.0)
        fenced = final is AgentStatus.PREEMPTED and (  # or its supervisor's fence
            fence.fence_left(attempt, settings, self._clock()) <= 0 or job.fenced())
        retire = leftover.retirer(self._pulls, self._vm_beats, key, settings, job.launch.container, self._shutdown,
                                  self._slots)
        note, report = leftover.hold(job, note, lambda at: self._listen(attempt, at, message=leftover.RUNNING_NOTE)[0],
                                     self._clock, lambda: self._shutdown.stopping, retire,
                                     stopped=stopped, lost=fenced,
                                     lease_out=lambda: fence.fence_left(attempt, settings, self._clock()) <= 0)
        self._end(attempt, output, outcome.exit_code, final,
                  f"{note}; its outputs were not uploaded" if spent and data and data.outputs else note,
                  data=data, upload=not spent, tail=outcome.tail, limit_s=limit, checkpoint=checkpoint, report=report,
                  exited=exited, over_limit="disk" if spent else "max_runtime_s" if timed_out else None)  # not retried
        leftover.after_report(job, key, retire, lambda: self._shutdown.stopping, reported=report, lost=fenced,
                              unknown=final is AgentStatus.PREEMPTED and lost_while_running(
                                  container, outcome.exit_code, outcome.tail))

    def _end(self, attempt: AttemptReport, output: AttemptOutput, exit_code: int | None, final: AgentStatus,
             note: str | None, *, data: AttemptData | None, upload: bool = False, tail: str = "",
             limit_s: float | None = None, checkpoint: Checkpoint | None = None, over_limit: OverLimit | None = None,
             report: bool = True, exited: dict[str, object] | None = None) -> None:
        """Upload the outputs, close the output, send the final report (unless not ``report``: zen.agent.leftover);
        the attempt's directories are removed and its end counted whatever happens meanwhile.

        The status reported is the job's own (``final``: its exit code, or how the agent ended it), never the
        upload's: a STOP during the upload is ignored (the job has ended or was stopped already; Zen repeats STOP to
        every RUNNING heartbeat of a stopping job, and a STOP that cut the upload lost a stopped job's checkpoint);
        only the VM's shutdown or the fence cut it, or its budget: ``limit_s`` (the job's ``max_runtime_s``) from the
        job's end. A job may run that long; its outputs get as long again, so an attempt holds its VM about twice
        ``max_runtime_s`` at most, however its upload goes (not a constant: too short for a long job's checkpoints, no
        bound for a short one's). An upload that failed or was cut fails a job that exited 0 (its outputs are
        incomplete) and leaves any other status as it was, with a note. The exception: a job that exited 0 whose
        upload the VM's shutdown cut is PREEMPTED, so Zen requeues it (a preemption spends no attempt), as it would
        had the VM died without a word (the sweep's LOST): its outputs are not all saved, and an infrastructure event
        must not fail it for good. A job that failed on its own stays FAILED with its exit code (requeued it would run
        its failure again); one stopped or preempted before stays STOPPED or PREEMPTED."""
        uploads = data if data is not None and not data.scratch_only else None  # a scratch directory alone: never sent
        try:
            if self._disk is not None and data is not None and upload:  # its directory is only read from now
                self._disk.ended((attempt.job_id, attempt.attempt))
            if data is not None and checkpoint is not None and upload:
                note = save_last(lambda *a, **kw: self._transfer(attempt, data, *a, **kw), data, checkpoint, note,
                                 limit_s)
            elif checkpoint is not None:  # no last save: none under way writes after the report either
                checkpoint.close()
            # ``exited``: the job's start's, for the agent restarted should this one die now
            if exited is not None and report and (journal := self._reporter.journal) is not None:
                journal.exited(attempt.job_id, attempt.attempt,
                               resume.ended(exited, final, exit_code, note, tail, data, limit_s, attempt, self._clock(),
                                            output.numbered()))
            if uploads is not None and upload:
                cut = self._transfer(attempt, uploads, "uploading outputs", uploads.uploaded,
                                     lambda: uploads.upload(final, exit_code),
                                     shutdown_grace_s=UPLOAD_GRACE_S, stops=False, limit_s=limit_s,
                                     over=f"zen: uploading outputs exceeded its budget, max_runtime_s={limit_s}")
                if cut is not None and final is AgentStatus.SUCCEEDED:
                    final = cut[0] if cut[0] in (AgentStatus.PREEMPTED, AgentStatus.STOPPED) else AgentStatus.FAILED
                if cut is not None:
                    note = f"{note}\n{cut[1]}" if note else cut[1]
            # A file name the job chose (a lone surrogate): escaped, for the output too.
            note = escape_unstorable(note) if note else note
            summary = data.summary(unsent=over_limit == "disk") if data is not None else ""  # not run: no outputs
            preface = "\n".join(
                line for line in (note[-PREFACE_CHARS:] if note else note, summary) if line)[:PREFACE_CHARS]
            message = "\n".join(part for part in (preface, tail) if part)
            # The output before the final report: a user who sees the end status can read every line.
            ended = final.value if exit_code is None else f"{final.value}, exit code {exit_code}"
            brief = note.splitlines()[-1].removeprefix("zen: ").removeprefix("zen agent: ") if note else ""
            self._close_output(output, f"{ended} ({brief})" if brief else ended,
                               self._shutdown.budget(SHUTDOWN_REPORT_S) if self._shutdown.stopping else
                               min(OUTPUT_BUDGET_S, max(1.0, attempt.report_by + SHUTDOWN_OUTPUT_S - self._clock())))
            budget = self._shutdown.budget(0.0) if self._shutdown.stopping else FINAL_BUDGET_S
            if report:  # (not: a container the agent stopped may run on, zen.agent.leftover)
                self._reporter.job(attempt, final, budget_s=budget, exit_code=exit_code, message=message,
                                   over_limit=over_limit,
                                   data=uploads.heartbeat_fields() if uploads is not None else None)
        finally:
            if data is not None:
                self._log.info("job data", extra={"job_id": attempt.job_id, "attempt": attempt.attempt,
                                                  **data.heartbeat_fields()})
                data.cleanup()
            if self._disk is not None:  # its directory, if any, and its mark as begun (``DiskWatch.began``)
                self._disk.remove((attempt.job_id, attempt.attempt))
            self._ended((attempt.job_id, attempt.attempt))

    def finish(self, attempt: AttemptReport, ended: resume.Ended, data: AttemptData | None) -> None:
        """The upload (``data``: its directory, locked) and final report of an attempt whose job ended under an agent
        of this VM that died (``zen.agent.resume``), in the slot taken for it."""
        self._pulls.began((attempt.job_id, attempt.attempt), ended.gpus)
        output = AttemptOutput(attempt.job_id, attempt.attempt, self._identity.vm, self._sink, self._settings.output,
                               self._settings.tail_bytes, numbered=ended.numbered)  # its end after the lines shipped
        self._end(attempt, output, ended.exit_code, ended.status, ended.note(self._identity.vm), data=data,
                  upload=data is not None, tail=ended.tail, limit_s=ended.upload_left(self._clock()))

    def _transfer(self, attempt: AttemptReport, data: AttemptData, what: str, progress: Progress,
                  work: Callable[[], object], shutdown_grace_s: float = 0.0, stops: bool = True,
                  unavailable: str | None = None, limit_s: float | None = None, over: str = "",
                  verdict: Callable[[], str | None] = lambda: None) -> tuple[AgentStatus, str] | None:
        """``transfer``, heartbeating this attempt; the status and note if it was cut or failed."""
        cut = transfer(data, what, progress, work, listen=lambda *a, **kw: self._listen(attempt, *a, **kw),
                       stopping=lambda: self._shutdown.stopping, clock=self._clock,
                       shutdown_grace_s=shutdown_grace_s, grace_s=self._settings.stop_grace_s, stops=stops,
                       unavailable=unavailable, limit_s=limit_s, over=over,
                       fenced=lambda: fence.fenced(attempt, self._settings, self._clock(), what),
                       shutdown_left=lambda: self._shutdown.left(SHUTDOWN_OUTPUT_S + SHUTDOWN_REPORT_S),
                       report_left=lambda: attempt.report_by - self._clock(), verdict=verdict,
                       shut_down=lambda step: self._shutdown.cut(self._identity.vm, step))
        if cut is not None:
            self._log.error(f"{what} cut or failed", extra={"job_id": attempt.job_id, "attempt": attempt.attempt,
                                                            "status": cut[0].value, "reason": cut[1]})
        return cut

    def _supervise(self, job: RunningJob, attempt: AttemptReport, over: str,
                   notice: Callable[[], None] | None = None) -> tuple[AgentStatus | None, str | None]:
        """Heartbeat until the job ends, is stopped, runs out of time, or the agent shuts down. Returns the final status
        when the agent decided it (else the exit code decides) and a note before the output tail (``over``: out of
        time). ``notice``: ZEN_PREEMPTION_NOTICE, at the VM's shutdown and a queue's preemption (zen.core.stops)."""
        settings = self._settings
        fields = {"job_id": attempt.job_id, "attempt": attempt.attempt}
        self._reporter.job(attempt, AgentStatus.RUNNING, budget_s=min(10.0, settings.heartbeat_s),
                           abandon=lambda: self._shutdown.stopping)
        next_beat = self._clock() + settings.heartbeat_s
        renewed = None
        while job.poll() is None:
            if attempt.accepted_at != renewed:  # the job's supervisor keeps the lease too (zen.agent.launch)
                renewed = attempt.accepted_at
                job.renew(fence.fence_left(attempt, settings, self._clock()))
            if self._shutdown.stopping:
                self._log.warning("stopping the job: agent shutting down", extra=fields)
                if notice is not None:  # ZEN_PREEMPTION_NOTICE appears as SIGTERM goes: time to checkpoint
                    notice()
                job.stop(min(settings.stop_grace_s, max(0.0, self._shutdown.left(SHUTDOWN_S))),  # its grace is left
                         within_s=max(0.0, self._shutdown.left(SHUTDOWN_OUTPUT_S + SHUTDOWN_REPORT_S)))
                vm, why = self._identity.vm, self._shutdown.reason  # (a host maintenance: not "shut down")
                return AgentStatus.PREEMPTED, f"zen: {self._shutdown.said(vm, f'VM {vm} shut down ({why})')}"
            if job.over_time():
                self._log.warning("stopping the job: max_runtime_s exceeded",
                                  extra={**fields, "max_runtime_s": job.spec.max_runtime_s})
                job.stop(settings.stop_grace_s)
                return AgentStatus.FAILED, over
            if (fenced := fence.fenced(attempt, settings, self._clock())) is not None:
                self._log.warning("stopping the job: no heartbeat reached Zen", extra={
                    **fields, "fence_s": fence.fence_s(settings)})  # its grace counts from the fence's fall (a pause)
                job.stop(max(0.0, settings.stop_grace_s + fence.fence_left(attempt, settings, self._clock())))
                return AgentStatus.PREEMPTED, fenced
            if self._disk is not None and (spent := self._disk.verdict((attempt.job_id, attempt.attempt))):
                self._log.warning("stopping the job: over its share of the disk", extra={**fields, "reason": spent})
                job.stop(settings.stop_grace_s)  # FAILED, not rerun: it would fill its share again
                return AgentStatus.FAILED, spent
            next_beat, order = self._listen(attempt, next_beat)
            if order is None:
                continue
            if order.action is ControlAction.STOP and job.poll() is None:
                self._log.info("stopping the job on request", extra={**fields, "reason": order.reason})
                if notice is not None and preempts(order.reason):
                    notice()
                job.stop(settings.stop_grace_s)
                return AgentStatus.STOPPED, f"zen: stopped ({order.reason or 'stop requested'})"
            if order.action is ControlAction.STOP:
                break  # it ended on its own just now: report how it ended
            self._log.info("control message for the running attempt ignored",
                           extra={**fields, "action": order.action.value, "reason": order.reason})
        if job.fenced():  # the agent could not run (stopped, starved) and its job's supervisor fenced the job
            self._log.warning("the job was stopped by its supervisor: the agent did not renew its lease in time",
                              extra={**fields, "fence_s": fence.fence_s(settings)})
            return AgentStatus.PREEMPTED, (fence.fenced(attempt, settings, self._clock()) or
                                           "zen: stopped by its supervisor: the agent did not renew the attempt's "
                                           "lease in time (Zen would have taken it for lost and run it elsewhere)")
        if (forked := job.over_tasks()) is not None:  # a host process over its task limit (zen.agent.tasklimit)
            return AgentStatus.FAILED, forked
        return None, None

    def _listen(self, attempt: AttemptReport, next_beat: float, *, message: str | None = None,
                data: dict[str, int | float] | None = None) -> tuple[float, ControlMessage | None]:
        """One slice of a running attempt: its RUNNING heartbeat when due (at ``next_beat``, with ``message``
        and ``data``: a transfer's progress; returns the next), the VM's, and the control message about it, if one
        came (acked). Its heartbeat takes no longer than what is left of the attempt's fence, and once that fell the
        caller stops it first."""
        settings = self._settings
        if self._clock() >= next_beat:
            left = fence.fence_left(attempt, settings, self._clock())
            self._reporter.job(attempt, AgentStatus.RUNNING, budget_s=min(10.0, settings.heartbeat_s, max(1.0, left)),
                               message=message, data=data, abandon=lambda: self._shutdown.stopping)
            next_beat = self._clock() + settings.heartbeat_s
        if fence.fence_left(attempt, settings, self._clock()) <= 0:
            return next_beat, None
        self._vm_beats.beat()
        received = self._controls.next((attempt.job_id, attempt.attempt), SLICE_S)
        if received is None:
            return next_beat, None
        control, order = received
        control.ack()
        stop = order.action is ControlAction.STOP
        within = answer_within(control.attributes.get("answer_within_s")) if stop else None
        if within is not None:  # Zen ends the stopping job without our report then (counted from when it made the
            # STOP): the upload must end sooner; the latest-made STOP's holds while each one's moves (zen.core.stops)
            attempt.stopped(self._clock(), within, moves(control.attributes, order.reason),
                            made_at(control.attributes) or control.published)
        return next_beat, order

    def _ended(self, key: Key) -> None:
        with self._lock:
            self.jobs_run += 1
        self._pulls.ended(key)
        self._slots.ended(key)
        self._vm_beats.changed()

    def _close_output(self, output: AttemptOutput, note: str, budget_s: float = OUTPUT_BUDGET_S) -> None:
        try:
            output.close(note, budget_s)
        except Exception:  # noqa: BLE001 - output is worth less than the report that follows
            self._log.exception("job output not closed", extra={"job_id": output.job_id, "attempt": output.attempt})

