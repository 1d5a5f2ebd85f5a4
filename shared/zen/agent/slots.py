"""Several attempts on one VM at once (issue 15, a cluster's ``max_jobs_per_vm``): ``Capacity`` (the
VM's GPUs and the most jobs it runs at once, from ``ZEN_AGENT_*``, the template's attributes or the
configuration: :func:`resolve_capacity`), ``Slots`` (the attempts held and their disjoint GPU indices,
lowest first; the claims given back and the attempts run), and ``ControlRouter`` (hands each message of
the VM's one control subscription to the attempt it is about, or an offered start to the idle loop).
Behaviour: docs/reference/agent.md (``max_jobs_per_vm``); why ``given_back``/``ran``: #the-loop-and-the-claim
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from pydantic import ValidationError

from zen.agent.deliveries import ControlDelivery, StartDelivery
from zen.agent.limits import given_or_attribute
from zen.agent.orders import read_order
from zen.agent.ranlog import RanLog, path_for as ran_log_path
from zen.agent.removal import remove_container
from zen.agent.runner import container_name
from zen.agent.shutdown import SLICE_S
from zen.core.config import ClusterConfig
from zen.core.errors import ConfigError, describe_validation_error
from zen.core.models import START_OFFER, ControlAction, ControlMessage

if TYPE_CHECKING:
    from zen.agent.identity import Identity, MetadataServer
    from zen.agent.settings import AgentSettings
    from zen.agent.transport import Transport

GIVEN_BACK_KEPT = 16  # VmHeartbeat.given_back holds at most 16
RAN_KEPT = 256  # attempts remembered as run here: a copy of one's start is dropped, never claimed
GPUS_ATTRIBUTE = "zen-gpu-count"
MAX_JOBS_ATTRIBUTE = "zen-max-jobs-per-vm"
Key = tuple[str, int]  # (job_id, attempt)


@dataclass(frozen=True)
class Capacity:
    gpus: int = 1  # the VM's GPUs
    max_jobs: int = 1  # attempts it runs at once

    @property
    def shared(self) -> bool:
        return self.max_jobs > 1


def resolve_capacity(settings: AgentSettings, metadata: MetadataServer | None, identity: Identity,
                     cluster: ClusterConfig) -> Capacity:
    """Each figure from the first source that has it: the settings, the template's instance attribute
    (on GCE only; set and empty means the configuration's), the cluster's configuration."""

    def one(given: int | None, attribute: str, configured: int) -> int:
        _, value = given_or_attribute(given, metadata, identity, attribute, integer=True)
        return configured if value is None else value

    capacity = Capacity(gpus=one(settings.gpus, GPUS_ATTRIBUTE, cluster.gpu_count),
                        max_jobs=one(settings.max_jobs_per_vm, MAX_JOBS_ATTRIBUTE, cluster.max_jobs_per_vm))
    if capacity.max_jobs > capacity.gpus:
        raise ConfigError(f"{capacity.max_jobs} jobs at once on a VM of {capacity.gpus} GPUs: each job needs one")
    return capacity


class Slots:
    """The attempts this VM holds, from before their claim to their end, and their GPUs (thread-safe)."""

    def __init__(self, capacity: Capacity = Capacity()):
        self.capacity = capacity
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a claim confirmed, a slot given back
        self._gpus: dict[Key, tuple[int, ...]] = {}  # held, in the order taken
        self._running: dict[Key, None] = {}  # of those, confirmed and not yet ended
        self._claims: set[Key] = set()  # of those, not confirmed (yet): a claim awaiting its answer, or refused
        self._given_back: deque[Key] = deque(maxlen=GIVEN_BACK_KEPT)  # starts dropped (``dropped``), newest first
        self._ran: deque[Key] = deque(maxlen=RAN_KEPT)  # confirmed here, newest last
        self._ran_log: RanLog | None = None  # kept on disk for the next agent of this VM (zen.agent.ranlog)
        self._disk = threading.Lock()  # its writes, one at a time (not under _lock: a claim never waits on a disk)

    @classmethod
    def of_vm(cls, capacity: Capacity, work_dir: str | Path, vm: str) -> "Slots":
        """A VM's slots as its agent runs them: what it ran kept in its work directory (``zen.agent.ranlog``)."""
        slots = cls(capacity)
        slots.remember_in(ran_log_path(work_dir, vm))
        return slots

    def remember_in(self, path: Path) -> None:
        """Keep the attempts run here in ``path`` too, and take those an earlier agent of this VM ran."""
        self._ran_log = RanLog(path, RAN_KEPT)
        earlier = self._ran_log.load()
        with self._lock:
            self._ran.extend(key for key in earlier if key not in self._ran)

    def never_fits(self, gpus: int | None) -> str | None:
        """Why an attempt asking for ``gpus`` (None: the whole VM) can never run here, if it cannot."""
        if gpus is not None and gpus > self.capacity.gpus:
            return f"the job holds {gpus} GPUs, this VM has {self.capacity.gpus}"
        return None

    def holds(self, key: Key) -> bool:
        with self._lock:
            return key in self._gpus

    def ran(self, key: Key) -> bool:
        """Whether this VM ran ``key`` (confirmed; among the last ``RAN_KEPT``). Running the same attempt
        again here is never right: a new run of a job is a new attempt, with a new number."""
        with self._lock:
            return key in self._ran

    def take(self, key: Key, gpus: int | None) -> tuple[int, ...] | None:
        """Hold a slot for ``key``: its GPU indices (``()`` when the VM runs one job at a time: all of
        them, no device list), or None when it does not fit now or is held already."""
        with self._lock:
            if key in self._gpus or len(self._gpus) >= self.capacity.max_jobs:
                return None
            if not self.capacity.shared:
                ids: tuple[int, ...] = ()
            else:
                used = {index for taken in self._gpus.values() for index in taken}
                free = [index for index in range(self.capacity.gpus) if index not in used]
                needs = self.capacity.gpus if gpus is None else gpus
                if len(free) < needs:
                    return None
                ids = tuple(free[:needs])
            self._gpus[key] = ids
            self._claims.add(key)
            if key in self._given_back:  # claimed again: off the list before its CLAIMED draws a seq
                self._given_back.remove(key)
            return ids

    def full(self) -> bool:
        """No attempt could be taken now (so the agent does not pull)."""
        with self._lock:
            used = sum(len(ids) for ids in self._gpus.values())
            return len(self._gpus) >= self.capacity.max_jobs or (self.capacity.shared and used >= self.capacity.gpus)

    def running(self, key: Key) -> None:
        with self._disk:  # the list copied and written in turn: a rewrite never drops another attempt's line
            with self._lock:
                self._running[key] = None
                self._claims.discard(key)
                self._ran.append(key)
                newest = list(self._ran)
                self._changed.notify_all()
            if self._ran_log is not None:
                self._ran_log.add(key, newest)

    def dropped(self, key: Key) -> None:
        """``key``'s start was dropped, its claim unanswered (given back, or cut by the shutdown) or told RELEASE (a
        later try of the claim, sent before the answer came, may still win the attempt once it is requeued): named in
        ``given_back`` from now on, unless this VM ran the attempt (a copy of its start claimed after the
        run: its reports may still be on their way, and Zen must not take the attempt for one that never ran)."""
        with self._lock:
            if key in self._ran:
                return
            if key in self._given_back:
                self._given_back.remove(key)
            self._given_back.appendleft(key)

    def given_back(self) -> list[Key]:
        """The attempts whose start was dropped (``dropped``), most recent first, not claimed again since."""
        with self._lock:
            return list(self._given_back)

    def ended(self, key: Key) -> None:
        with self._lock:
            self._running.pop(key, None)

    def give_back(self, key: Key) -> None:
        with self._lock:
            self._running.pop(key, None)
            self._gpus.pop(key, None)
            self._claims.discard(key)
            self._changed.notify_all()

    def claiming(self, key: Key | None = None) -> bool:
        """Whether a slot holds a claim (``key``'s) not confirmed: awaiting its answer, or refused, not given back."""
        with self._lock:
            return key in self._claims if key else bool(self._claims)

    def take_after_claims(self, key: Key, gpus: int | None, timeout_s: float) -> tuple[int, ...] | None:
        """``take``, waiting up to ``timeout_s`` while claims hold slots (``claiming``): a start Zen offers instead
        of a claim it refused (``zen.jobs.claims.outranked``) may need that claim's GPUs, given back a moment later."""
        deadline = time.monotonic() + timeout_s
        while (ids := self.take(key, gpus)) is None:
            with self._lock:
                if not self._claims or (left := deadline - time.monotonic()) <= 0:
                    return None
                self._changed.wait(min(left, 0.1))  # (a slot given back between the take and this wait: 0.1 s late)
        return ids

    def held(self) -> list[Key]:
        """The attempts running now, oldest first (what VM heartbeats report)."""
        with self._lock:
            return list(self._running)


class ControlRouter:
    """The VM's control messages, each handed to the attempt it is about (``open`` to ``close``), and
    the starts offered to this VM (``offer``).

    ``next`` waits at most one slice: the reader of the subscription is whichever caller finds no
    one else reading; the others wait for their own messages. One thread alone (a VM running one job
    at a time) always reads itself, exactly as it did before there were several.

    A start offer is kept for the idle loop only while ``takes_offers()`` (the VM has a free slot, or a claim
    awaiting its answer, which Zen may refuse for the job it offers: ``zen.jobs.claims.outranked``; and is not
    retiring or shutting down); else it is acked and dropped at once, and so is one the idle loop gives back (no
    room for its GPUs once the claims holding slots are over, its claim unanswered). Dropping is safe and never spins:
    the scheduler offers a start only with a widening due (``Job.widen_at``, ``data_wait_s`` later),
    and the tick then publishes it to the start subscriptions, where any VM may take it; so an offer
    this VM cannot take costs the job at most that wait (``data_wait_s`` + a tick), while the other
    warm VMs it was offered to may take it meanwhile. A nack would instead bring it straight back to
    this VM (its subscription's only reader, no backoff) over and over, and holding it unacked until
    a slot frees would fill the control stream (flow control) that carries the orders."""

    def __init__(self, transport: Transport, vm: str, log: logging.LoggerAdapter,
                 takes_offers: Callable[[], bool] = lambda: False, docker: str | None = None):
        self._transport = transport
        self._docker = docker  # the docker CLI in container mode (a stray STOP's container is removed); None: local
        self._vm = vm
        self._log = log
        self._takes_offers = takes_offers
        self._ready = threading.Condition()
        self._inboxes: dict[Key, deque[tuple[ControlDelivery, ControlMessage]]] = {}
        self._offers: deque[StartDelivery] = deque()
        self._unread: deque[ControlDelivery] = deque()  # an order read_waiting came upon: the next reader's
        self._reading = False

    def offer(self) -> StartDelivery | None:
        """The oldest start offered to this VM and not yet taken, if any (the caller acks it or gives it back)."""
        with self._ready:
            return self._offers.popleft() if self._offers else None

    def has_offer(self) -> bool:
        with self._ready:
            return bool(self._offers)

    def drop_offers(self, why: str) -> None:
        """Ack and drop every offer waiting (the VM cannot take them now)."""
        while (delivery := self.offer()) is not None:
            self._drop_offer(delivery.message_id, delivery.attributes, delivery.offer, why)

    def _offered(self, control: ControlDelivery) -> None:
        attributes = control.attributes
        if attributes.get("vm") != self._vm:
            self._drop_offer(control.message_id, attributes, control.ack, "offered to another VM")
            return
        if not self._takes_offers():
            self._drop_offer(control.message_id, attributes, control.ack, "this VM cannot take a job now")
            return
        self._log.info("start offered to this VM", extra={
            "message_id": control.message_id, "job_id": attributes.get("job_id"), "attempt": attributes.get("attempt")})
        with self._ready:
            self._offers.append(StartDelivery(f"offer-{control.message_id}", control.message_id, control.data,
                                              attributes, 1, offer=control.ack))
            self._ready.notify_all()

    def _drop_offer(self, message_id: str, attributes: dict[str, str], ack: Callable[[], None] | None,
                    why: str) -> None:
        self._log.info("start offer dropped; the tick widens its start", extra={
            "message_id": message_id, "why": why, "job_id": attributes.get("job_id"),
            "attempt": attributes.get("attempt")})
        if ack is not None:  # an offer's StartDelivery always carries its control message's ack
            ack()

    def open(self, key: Key) -> None:
        with self._ready:
            self._inboxes.setdefault(key, deque())

    def close(self, key: Key) -> None:
        with self._ready:
            left = self._inboxes.pop(key, ())
        for control, order in left:
            self.ignore(control, order, "its attempt has ended")

    def next(self, key: Key | None, timeout_s: float) -> tuple[ControlDelivery, ControlMessage] | None:
        """The next control message about ``key`` within ``timeout_s``, not yet acked; None if none
        came (``key`` None: the agent holds nothing, and every message is about someone else)."""
        with self._ready:
            inbox = self._inboxes.get(key) if key else None
            if inbox:
                return inbox.popleft()
            if self._reading:  # another attempt reads: it hands this one its messages
                self._ready.wait(timeout_s)
                return inbox.popleft() if inbox else None
            self._reading = True
        control = self._read(timeout_s)
        return None if control is None else self._route(control, key)

    def _route(self, control: ControlDelivery, key: Key | None) -> tuple[ControlDelivery, ControlMessage] | None:
        """``control``, just read: returned if it is about ``key``, else handed to its attempt's inbox, queued as
        an offer, or ignored."""
        if control.attributes.get("kind") == START_OFFER:  # a start offered to this VM: never an order
            self._offered(control)
            return None
        order = self._decode(control)
        if order is None:
            return None
        about = (order.job_id, order.attempt)
        if order.vm == self._vm and about == key:
            return control, order
        with self._ready:
            if order.vm == self._vm and about in self._inboxes:
                self._inboxes[about].append((control, order))
                self._ready.notify_all()
                return None
        if order.vm == self._vm and order.action is ControlAction.STOP and self._docker is not None:
            self._remove_stray(order, self._docker)  # held by no attempt here (an inbox is open from claim to end)
        self.ignore(control, order, "no job in hand" if key is None else f"not about {key[0]} attempt {key[1]}")
        return None

    def _remove_stray(self, order: ControlMessage, docker: str) -> None:
        """Remove the container of an attempt this VM was told to STOP but does not hold (an agent before
        this one ran it, and crashed): best effort, one ``docker rm -f`` (never raises)."""
        name = container_name(order.job_id, order.attempt)
        gone = remove_container(name, docker, tries=1)
        self._log.warning("STOP for an attempt not held here: its container removed", extra={
            "job_id": order.job_id, "attempt": order.attempt, "container": name, "gone": gone})

    def read_waiting(self, most: int = 32) -> None:
        """Queue the starts offered to this VM that are already waiting (``offer``), without waiting for
        more: one offered while the idle loop pulled from its region's subscription then goes before
        what it pulled. It stops at the first order, which is kept, unread, for the next reader (the
        claim that follows reads it as it always did)."""
        for _ in range(most):
            with self._ready:
                if self._reading or self._unread:
                    return
                self._reading = True
            control = self._read(0.0)
            if control is None:
                return
            if control.attributes.get("kind") != START_OFFER:
                with self._ready:
                    self._unread.append(control)
                return
            self._offered(control)

    def _read(self, timeout_s: float) -> ControlDelivery | None:
        """One message, read as the subscription's reader (the caller set ``_reading`` under the lock;
        this gives the role back): an order ``read_waiting`` set aside first, else the next that comes."""
        try:
            with self._ready:
                control = self._unread.popleft() if self._unread else None
            return control if control is not None else self._transport.next_control(timeout_s)
        finally:
            with self._ready:
                self._reading = False
                self._ready.notify_all()

    def _decode(self, control: ControlDelivery) -> ControlMessage | None:
        try:
            return read_order(control.data, control.message_id, self._log)  # (a newer Zen's STOP: zen.agent.orders)
        except ValidationError as exc:
            self._log.error("invalid control message dropped", extra={
                "message_id": control.message_id, "reason": describe_validation_error(exc)})
            control.ack()
            return None

    def stop_waiting(self, key: Key, most: int = 64) -> str | None:
        """The reason of a STOP about ``key`` that came already (acked), else None: every message waiting is read
        (others' go to their inboxes, offers are queued), and other orders about ``key`` are ignored, as a running
        attempt's are. A STOP that came between the CONFIRM and the job's start (while its secrets were read) was
        read only once the job ran, and one behind another message (an offer, another attempt's order) not at
        all before it: a job stopped before it started ran all the same. While another attempt reads, this waits
        for it once (it hands this attempt what it reads), no more: a start is never held behind its reads."""
        waited = False
        for _ in range(most):
            with self._ready:
                inbox = self._inboxes.get(key)
                received = inbox.popleft() if inbox else None
                if received is None and self._reading:  # another attempt reads: it hands this one its messages
                    if waited:  # once (a running attempt reads nearly always: a start waited up to 64 of these)
                        return None
                    self._ready.wait(SLICE_S)
                    waited = True
                    continue
                self._reading = self._reading or received is None
            if received is None:
                if (control := self._read(0.0)) is None:
                    return None  # nothing more waiting
                if (received := self._route(control, key)) is None:
                    continue  # another's, or an offer
            if received[1].action is ControlAction.STOP:
                received[0].ack()
                return received[1].reason or "stop requested"
            self.ignore(*received, "its attempt is starting")
        return None

    def ignore(self, control: ControlDelivery, order: ControlMessage, why: str) -> None:
        self._log.info("control message ignored", extra={
            "message_id": control.message_id, "why": why, "job_id": order.job_id, "attempt": order.attempt,
            "action": order.action.value, "reason": order.reason})
        control.ack()
