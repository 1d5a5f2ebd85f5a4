"""The agent loop: pull one start message (or take one offered to this VM alone), claim it, run it,
report, go back for the next one; one attempt at a time, or ``max_jobs_per_vm`` at once, each in a
thread with its GPUs (``zen.agent.slots``). ``Agent`` builds its parts and holds them: the claim
(``zen.agent.claim.Claimer``), the attempt once confirmed (``zen.agent.attempt.AttemptRunner``: stage,
run, supervise, upload, report), the VM's heartbeats (``zen.agent.vmbeat``), the shutdown
(``zen.agent.shutdown``); the loop itself keeps the pull limits, refusal waits and retirement, and
never exits on one bad message.
States and why: docs/reference/agent.md#the-loop-and-the-claim
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, MutableMapping

from pydantic import ValidationError

from zen.adapters.joblogs import Sink
from zen.adapters.secret_manager import secret_reader
from zen.agent import leftover, resume
from zen.agent.attempt import AttemptRunner
from zen.agent.backoff import OFFER_WAIT_S, ClaimBackoff
from zen.agent.cache import InputCache
from zen.agent.claim import Answer, Claimer, about_the_attempt
from zen.agent.container import Sandbox
from zen.agent.diskquota import DiskShare, DiskWatch, disk_size
from zen.agent.identity import Identity
from zen.agent.imagepull import pull_ahead
from zen.agent.journal import RESEND_S, Journal
from zen.agent.leases import Leases
from zen.agent.limits import DailyPulls, PullLimits
from zen.agent.outage import PullOutage
from zen.agent.removal import remove_container
from zen.agent.reports import AttemptReport, Reporter
from zen.agent.restart import end_left_running
from zen.agent.runner import container_name, remove_image
from zen.agent.settings import AgentSettings
from zen.agent.shutdown import SLICE_S, VM_STOPPING_S, Shutdown
from zen.agent.slots import ControlRouter, Slots
from zen.agent.transport import StartDelivery, Transport, TransportError
from zen.agent.vmbeat import VmBeats
from zen.agent.workdir import sweep_work_dir
from zen.core.errors import describe_validation_error
from zen.core.models import Heartbeat, StartMessage, VmState

log = logging.getLogger("zen.agent")


class _Log(logging.LoggerAdapter[logging.Logger]):
    """Adds vm / cluster / region to every line, keeping the call's own fields (job_id, ...)."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


class Agent:
    """The loop, and the parts it is built of (each constructed here with what it uses)."""

    def __init__(self, identity: Identity, settings: AgentSettings, transport: Transport, *, local: bool,
                 clock: Callable[[], float] = time.monotonic, base_env: Mapping[str, str] | None = None,
                 sink: Sink | None = None, pulls: DailyPulls | None = None, slots: Slots | None = None,
                 sandbox: Sandbox | None = None, read_secret: Callable[[str], bytes] | None = None,
                 left_gone: Callable[[str, int], bool] | None = None,
                 power_off: leftover.PowerOffAtStart | None = None):
        self.identity = identity
        # Whether an attempt an earlier agent ran is known gone, its container (zen.agent.restart); None: none is.
        self.left_gone = left_gone
        self.settings = settings
        self.transport = transport
        self.local = local
        self.log = _Log(log, identity.log_fields())
        self.shutdown = Shutdown(clock, settings.stop_grace_s)
        self.journal = Journal(settings.work_dir, identity.vm, identity.log_fields())  # final reports till sent
        self.reporter = Reporter(identity, transport.publish, clock=clock, journal=self.journal,
                                 heartbeat_timeout_s=settings.heartbeat_timeout_s)
        self.pulls = pulls or DailyPulls(PullLimits(), 0, clock)  # per-day limits; none by default
        self.slots = slots or Slots()  # one job at a time by default
        self.backoff = ClaimBackoff(clock)  # claims Zen refused: the next pull waits (zen.agent.backoff)
        # Warm inputs and images (zen.agent.cache); images are removed from the VM only where docker runs them.
        self.cache = InputCache(settings.cache_path(identity.vm), settings.cache_bytes, settings.images_keep,
                                None if local else lambda image: remove_image(image, settings.docker))
        self._outage = PullOutage(clock)  # pulls failing: no IDLE said (zen.agent.outage)
        self.vm_beats = VmBeats(self.reporter, self.slots, self.cache, self.pulls, self._outage, self.shutdown,
                                clock, settings.vm_heartbeat_s, self.log)
        self.controls = ControlRouter(transport, identity.vm, self.log, takes_offers=self._takes_offers,
                                      docker=None if local else settings.docker)  # strays' containers removed
        self.leases = Leases(transport, self.log)
        self.claimer = Claimer(settings, transport, self.leases, self.reporter, self.controls, self.backoff,
                               self.pulls, self.shutdown, identity.vm, clock, self.log)
        # Each attempt's share of the work disk (zen.agent.diskquota), from its size now; the cache gives way first.
        self.disk = DiskWatch(settings.work_dir, DiskShare(
            disk_size(settings.work_dir), self.slots.capacity.max_jobs, settings.disk_share,
            settings.disk_per_job_bytes), look_s=settings.disk_look_s, log=self.log, make_room=self.cache.give_way)
        self.attempts = AttemptRunner(identity, settings, self.reporter, self.controls, self.vm_beats, self.slots,
                                      self.pulls, self.cache, sandbox or Sandbox(),  # no limits by default
                                      self.shutdown, clock, self.log, local=local, sink=sink, base_env=base_env,
                                      read_secret=read_secret or secret_reader(),  # Secret Manager, lazily
                                      disk=self.disk)
        self._clock = clock
        self._resend_at = 0.0  # when the final reports kept are next sent again (_resend_kept)
        self._threads: list[threading.Thread] = []  # attempts running besides the loop (several at once)
        # The VM's power-off decided at the start (zen.agent.__main__): it shuts down at once, and is powered off once
        # the attempts an earlier agent left are reported (run), as a power-off decided while running (leftover.py).
        self._power_off = power_off
        if power_off is not None:
            self.shutdown.power_off("powered off: a container of an earlier attempt may still run", power_off.why)

    @property
    def jobs_run(self) -> int:
        return self.attempts.jobs_run

    # -- lifecycle -------------------------------------------------------------------------------
    def request_shutdown(self, reason: str) -> None:
        """Safe from a signal handler or another thread: only sets fields the loop polls."""
        self.shutdown.request(reason)

    @property
    def stopping(self) -> bool:
        return self.shutdown.stopping

    def run(self) -> int:
        """Serve jobs until asked to shut down. Returns the process exit code."""
        # The attempts a dead agent ran, said ended or resumed (their directories kept from the sweep), before any pull.
        resumed = end_left_running(self.journal, self.reporter, self.identity.vm, self.identity.project, self.settings,
                                   self.slots, self._clock, self.log,
                                   self.left_gone) if self.left_gone is not None else []
        self._sweep_work_dir()
        self.journal.replay(self.transport.publish)  # final reports a dead agent left, before any pull
        self._resend_at = self._clock() + RESEND_S
        if self._power_off is None:  # (powered off: no control message is needed, nor waited for)
            self.transport.open_control()
        self._threads += [resume.start(r, self.attempts, self.controls, self.journal, self.slots, self.log) for r in resumed]
        self.log.info("agent started", extra={"local": self.local})
        self.vm_beats.beat(force=True)
        pause = self.settings.poll_s
        try:
            while not self.stopping and not self.pulls.exhausted():
                self.vm_beats.beat()
                self._resend_kept()
                # All slots taken, claims may reach a limit, or claims were refused just now: wait.
                if self.slots.full() or self.pulls.blocked() or self.backoff.waiting():
                    self._idle_wait(self.settings.poll_s)
                    continue
                if (awaited := self.backoff.offer_wait()) > 0 and not self.controls.has_offer():
                    self._idle_wait(awaited)  # the job of higher priority Zen offers instead of one it refused:
                    continue  # come (taken next), or waited for long enough (no wait left)
                delivery = self.controls.offer()  # a start offered to this VM alone (a warm cache) first
                if delivery is not None:
                    self.backoff.offer_taken()  # (the one awaited after a claim refused outranked, or another)
                if delivery is None:
                    try:
                        pulled = self.transport.pull_start()
                    except TransportError as exc:
                        self.log.warning("pull failed; backing off", extra={"error": str(exc), "pause_s": pause})
                        self._outage.failed()
                        self._idle_wait(pause)
                        pause = min(pause * 2, 60.0)
                        continue
                    pause = self.settings.poll_s
                    if (lasted := self._outage.succeeded()) is not None:
                        self.log.warning("pulls work again; saying IDLE again", extra={"failed_for_s": round(lasted)})
                        self.vm_beats.due()
                    delivery = self._offered_meanwhile(pulled)
                if delivery is None:
                    self._idle_wait(self.settings.poll_s)
                    continue
                if not self._take(delivery):
                    self._idle_wait(self.settings.poll_s)  # given back (no room, its claim pending): not at once again
            self._retire()
        finally:
            for thread in self._threads:  # each sees the shutdown: its attempt ends PREEMPTED
                # (by the power-off's deadline at most, when one is asked for: zen.agent.leftover.retirer)
                thread.join(None if self.shutdown.power_off_reason is None else max(0.0, self.shutdown.left()))
            self._send_kept()  # before the power-off, if one is asked for: the VM goes at once, its disk with it
            if self._power_off is not None:  # the earlier agent's attempts reported: off now
                self._power_off.now()
            elif (why := self.shutdown.power_off_reason) is not None and self.settings.fence_file:  # reported: off now
                leftover.fence_vm(self.settings.fence_file, why)
            self.disk.close()
            self._shut_down()
        return 0

    def _shut_down(self) -> None:
        self.log.info("agent shutting down", extra={"reason": self.shutdown.reason})
        self.controls.drop_offers("the VM is shutting down")
        # A shared VM's last word lists its jobs (none by now) as its others do: Zen bills an attempt that ends after
        # it (a report read late, the sweep's) its share of the VM, not the whole VM (zen.jobs.decisions).
        self.reporter.vm(VmState.STOPPING, budget_s=self.shutdown.budget(-VM_STOPPING_S), held=self.slots.held(),
                         list_all=self.slots.capacity.shared, given_back=self.slots.given_back)
        self.transport.close()  # the control subscription is left to expire (PubSubTransport.close)

    def _send_kept(self) -> None:
        """The final reports kept, sent once more as the agent shuts down: a VM deleted takes its journal with it (and a
        report held in memory goes with this process), and Zen would rerun a job that ended. Before the VM's power-off
        when one is asked for (``zen.agent.leftover.fence_vm``: at once, no unit stopped, and the VM the MIG recreates
        has a new disk). Each within its budget, the first failure ends it, and none starts once the shutdown's time
        is out but the VM's STOPPING's (``_publish_by_deadline``): the power-off and STOPPING never wait for more."""
        if self.shutdown.left(VM_STOPPING_S) > 0:
            self.journal.replay(self._publish_by_deadline, leftovers=False)

    def _publish_by_deadline(self, message: Heartbeat, *, budget_s: float) -> None:
        """``transport.publish`` within ``budget_s`` and the shutdown's report budget, the VM's STOPPING kept after;
        ``TransportError`` (kept: not sent) once the shutdown has no time left for it."""
        if self.shutdown.left(VM_STOPPING_S) <= 0:
            raise TransportError("the shutdown's time is out (the VM's STOPPING kept): kept")
        self.transport.publish(message, budget_s=min(budget_s, self.shutdown.budget(VM_STOPPING_S)))

    def _sweep_work_dir(self) -> None:
        """The attempt directories an agent that died left, removed (``zen.agent.workdir``)."""
        sweep_work_dir(Path(self.settings.work_dir), Path(self.settings.cache_path(self.identity.vm)), self.log)

    # -- idle ------------------------------------------------------------------------------------
    def _retire(self) -> None:
        """Past a pull limit, a container left (``_hold``), or told it is being scaled down (``_refused``):
        RETIRED, pulling nothing, until shut down."""
        self.vm_beats.retire()  # before the ask: a VM heartbeat another thread sends from then on says RETIRED
        if not self.stopping:
            self.log.warning("taking no more jobs", extra={"reason": self.pulls.exhausted()})
            self.vm_beats.due()  # say RETIRED now
        while not self.stopping:
            self.vm_beats.beat(VmState.RETIRED)
            self._resend_kept()
            self._idle_wait(self.settings.poll_s)

    def _resend_kept(self) -> None:
        """The final reports this agent kept (not sent within their budget), sent again every ``RESEND_S``
        (``zen.agent.journal``): Zen takes a late final report; without it, a job that ended runs again."""
        if self._clock() >= self._resend_at:
            self.journal.replay(self.transport.publish, leftovers=False)
            self._resend_at = self._clock() + RESEND_S

    def _idle_wait(self, seconds: float) -> None:
        """Wait, handing on the control messages that come (to the attempts running, if any); over at
        once when a start is offered to this VM and it can take it (``ControlRouter``)."""
        deadline = self._clock() + seconds
        while not self.stopping and (remaining := deadline - self._clock()) > 0:
            if self.controls.has_offer():
                if self._takes_offers():
                    return
                self.controls.drop_offers("this VM cannot take a job now")
            self.controls.next(None, min(SLICE_S, remaining))

    def _offered_meanwhile(self, pulled: StartDelivery | None) -> StartDelivery | None:
        """A start offered to this VM while it pulled goes before the one it pulled (any VM of the region
        may take that one: it is given back); else what it pulled."""
        self.controls.read_waiting()
        offered = self.controls.offer()
        if offered is None:
            return pulled
        if pulled is not None:
            self.leases.nack(pulled)
        return offered

    def _takes_offers(self) -> bool:
        """Whether the idle loop would take a start now: a start offered to this VM waits for it meanwhile."""
        # While a claim awaits its answer, a start offered meanwhile is kept for after it (Zen may offer one instead,
        # zen.jobs.claims.outranked): a full VM, or one at its daily limit, counts that claim's slot.
        return (not self.stopping and not self.vm_beats.retired and not self.backoff.waiting()
                and (self.slots.claiming() or not self.pulls.blocked() and not self.slots.full()))

    # -- one start message -----------------------------------------------------------------------
    def _take(self, delivery: StartDelivery) -> bool:
        """Decide about one leased start message; never raises. It always ends acked or nacked (by
        the attempt's own thread, when the VM runs several at once). False: given back for lack of room, or
        as a copy of a start whose claim awaits its answer."""
        settled = False
        try:
            start = self._decode_start(delivery)
            if start is None:
                settled = True  # acked: it can never succeed
                return True
            if self.stopping or self.pulls.exhausted():  # (retired as it pulled: a host maintenance's notice, a
                return True  # limit an attempt reached): nacked below, another VM takes it
            mismatch = self._mismatch(start)
            if mismatch:
                self.log.error("start message not for this VM; giving it back", extra={
                    "job_id": start.job_id, "attempt": start.attempt, "reason": mismatch})
                return True
            key = (start.job_id, start.attempt)
            if self.slots.claiming(key):  # its claim may yet end without a win (refused: this may be the start Zen
                # published again; given back: this may be its own message delivered again), so never dropped
                self.log.info("another copy of a start this VM claims; given back", extra={
                    "job_id": start.job_id, "attempt": start.attempt, "message_id": delivery.message_id})
                return False  # nacked below, and not pulled again at once
            copy_of = "holds" if self.slots.holds(key) else "ran" if self.slots.ran(key) else None
            if copy_of:  # another copy of a start held or run here: never claimed (it would run twice)
                self.log.info(f"another copy of a start this VM {copy_of}; dropped", extra={
                    "job_id": start.job_id, "attempt": start.attempt, "message_id": delivery.message_id})
                self.leases.ack(delivery)
                settled = True
                return True
            gpu_ids = self.slots.take(key, start.gpus)
            if gpu_ids is None and delivery.offer is not None:  # the claim Zen refused for it may hold its GPUs still
                gpu_ids = self.slots.take_after_claims(key, start.gpus, OFFER_WAIT_S)
            if gpu_ids is None:
                self.log.info("no room for the job now; giving it back", extra={
                    "job_id": start.job_id, "attempt": start.attempt, "gpus": start.gpus})
                return False
            self.pulls.claimed(key)  # counted before the loop's next pull (the claim's answer may take a while)
            settled = True  # _hold acks or nacks it in every case
            if not self.slots.capacity.shared:
                self._hold(delivery, start, gpu_ids)
                return True
            thread = threading.Thread(target=self._hold, args=(delivery, start, gpu_ids), daemon=True,
                                      name=f"zen-attempt-{start.job_id}-{start.attempt}")
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            try:
                thread.start()
            except BaseException:
                settled = False  # nacked below
                self.pulls.ended(key)
                self.slots.give_back(key)
                raise
        except Exception:  # noqa: BLE001 - one bad message must not end the loop
            self.log.exception("error while handling a start message", extra={"message_id": delivery.message_id})
        finally:
            if not settled:
                self.leases.nack(delivery)
        return True

    def _hold(self, delivery: StartDelivery, start: StartMessage, gpu_ids: tuple[int, ...]) -> None:
        """Claim and run one attempt in the slot taken for it (``gpu_ids``: its GPUs when the VM runs
        several at once); never raises. The message ends acked or nacked, the slot given back
        (not if its container could not be removed)."""
        key = (start.job_id, start.attempt)
        attempt = AttemptReport(start.job_id, start.attempt)
        settled = False
        answer: Answer | None = None
        gone: bool | None = None
        self.controls.open(key)
        pulled = pull_ahead(start, self.settings.docker, self.local, self.cache.holds_image, self.log)
        try:
            answer = self.claimer.claim(delivery, attempt, start)
            settled = answer not in ("outranked", "timeout")  # _claim acks or nacks the others (these: below)
            if answer == "confirm":
                if not self.slots.capacity.shared:
                    self.controls.drop_offers("this VM runs the job it claimed")  # kept while it claimed
                if not self.local:  # till its final report: an agent restarted after this one died reports it ended
                    self.journal.running(*key)
                gone = self.attempts.run(start, attempt, gpu_ids)
            elif answer in ("timeout", "release", "outranked", "shutdown"):  # a claim of ours may win yet: VM
                # heartbeats name it until claimed again (released: a later try sent before the RELEASE came; cut by
                # the shutdown: the STOPPING names it, should its PREEMPTED not reach Zen)
                self.slots.dropped(key)
        except ValidationError as exc:
            if settled or not about_the_attempt(exc):
                self.log.exception("error while handling a start message", extra={"message_id": delivery.message_id})
            else:  # no CLAIMED can name it: no VM can ever claim it, and given back it would come back forever
                self.log.error("start message dropped: no heartbeat can name its attempt", extra={
                    "message_id": delivery.message_id, "reason": describe_validation_error(exc)})
                settled = self.leases.ack(delivery)
        except Exception:  # noqa: BLE001 - one bad message must not end the loop
            self.log.exception("error while handling a start message", extra={"message_id": delivery.message_id})
        finally:
            self.controls.close(key)
            self.pulls.ended(key)  # drops its claim; counts it only if it began and _run did not count its end
            ran = answer == "confirm" and start.image and not self.local  # in a container: it must be gone
            # Removed already (RunningJob), or shutting down (the VM is going, or the next agent removes
            # what is left): not again.
            if not ran or gone or self.stopping or remove_container(container_name(*key), self.settings.docker):
                self.journal.over(*key)  # a mark left: it ended without a final report; no restart reports it
                self.slots.give_back(key)
            else:  # it may run on (logged): its GPUs are never another job's, and the VM retires
                self.pulls.retire(leftover.left_reason(key))
            if not settled:  # given back once its slot is free: a copy of a start held here is dropped (_take)
                self.leases.nack(delivery)
            pulled(answer == "confirm")
        if answer == "timeout":
            self.vm_beats.changed()  # Zen requeues the attempt now, if our claim won, not at the next VM heartbeat

    def _decode_start(self, delivery: StartDelivery) -> StartMessage | None:
        try:
            return StartMessage.model_validate_json(delivery.data)
        except ValidationError as exc:
            self.log.error("invalid start message dropped", extra={
                "message_id": delivery.message_id, "reason": describe_validation_error(exc)})
            self.leases.ack(delivery)
            return None

    def _mismatch(self, start: StartMessage) -> str | None:
        if start.cluster != self.identity.cluster:
            return f"message is for cluster {start.cluster}, this VM is in {self.identity.cluster}"
        if self.identity.region not in start.regions:
            return f"job allows regions {start.regions}, this VM is in {self.identity.region}"
        return self.slots.never_fits(start.gpus)
