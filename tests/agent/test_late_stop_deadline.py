"""A STOP Pub/Sub delivers late: one delivered again (an ack lost, the control stream reopened) or held back (a
backlog while the stream was down). Zen counts its ``answer_within_s`` from when it made the STOP, but the agent
counted it from the STOP's receipt: a redelivered older STOP of a job its queue took back (``answer_moves`` "1": the
latest STOP's deadline holds) pushed the agent's deadline 20 s past Zen's, and a user's STOP held back 30 s likewise;
the agent still uploaded the checkpoint after Zen had ended the attempt without its report (and its rerun could
start beside it). The agent now counts from the STOP's Pub/Sub publish time, and an older-published STOP never
replaces a newer one's deadline. Zen's outbox may publish a STOP later than Zen made it (a publish that failed, sent
again at the next tick) or twice (one whose result was lost): the STOP says when Zen made it (``answer_made``), and
the agent counts from that, and orders the STOPs by it. Real job, the Cloud Storage stand-in (the upload held), a fake Pub/Sub stamping
each STOP with its publish time as the official client does, on the agent's virtual clock (no waiting)."""

from __future__ import annotations

import dataclasses
import sys
import time
from datetime import datetime, timedelta, timezone

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_preempted_upload_deadline import PREEMPTED_STOP_S, TAKEN_BACK, WRITES
from tests.agent.test_staging import client, objects  # noqa: F401 (fixture)
from tests.agent.test_upload_end import finals, settings, uploading
from zen.agent.transport import ControlDelivery
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat
from zen.core.stops import MADE, MOVES, made_attribute


class StampingTransport(FakeTransport):
    """Delivers each STOP with Pub/Sub's publish time (``published``, virtual, by message id) as the official client
    does, and its ``answer_made`` as Zen says it (``made_at``): each virtual time as the wall clock read it at the
    first such delivery, when the virtual clock stood at ``origin`` (the VM's wall clock does not follow the virtual
    one: a STOP published after that first delivery is at most as old as its receipt). One virtual time reads the
    same on every delivery. While ``held_still`` (the upload released, until its final report), waiting takes real
    time and the virtual clock stands still: the upload's real time cannot run the agent's deadlines out."""

    def __init__(self) -> None:
        super().__init__(VM)
        self.published_at: dict[str, float] = {}
        self.made_at: dict[str, float] = {}
        self.origin: tuple[datetime, float] | None = None
        self.held_still = False

    def next_control(self, timeout_s: float) -> ControlDelivery | None:
        if self.held_still and not self.controls:
            time.sleep(min(timeout_s, 0.01))
            return None
        delivery = super().next_control(timeout_s)
        if delivery is None or delivery.message_id not in self.published_at:
            return delivery
        wall, virtual = self.origin = self.origin or (datetime.now(timezone.utc), self.clock())

        def stamp(at: float) -> datetime:
            return wall + timedelta(seconds=at - virtual)

        made = self.made_at.get(delivery.message_id)
        return dataclasses.replace(delivery, published=stamp(self.published_at[delivery.message_id]),
                                   attributes=delivery.attributes | ({} if made is None else {MADE: made_attribute(stamp(made))}))


def _run(tmp_path, storage, script, release_at: float = 200) -> tuple[Heartbeat, float, float]:
    """The job ends 0 and its upload is held (until ``release_at`` s after the first RUNNING of the upload). Zen
    answers the RUNNINGs ``script(since)`` says, with its STOPs (message id, seconds after that first RUNNING it
    published it, ``answer_within_s``, ``answer_moves``, reason, and optionally when it made it: ``answer_made``).
    Returns the final report, the virtual time of the upload's first RUNNING and when the final report came."""
    held = storage.state.hold("result", "store")
    transport = StampingTransport()
    at: dict[str, float] = {}

    def zen(message):
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=VM, job_id="up", attempt=1, action=ControlAction.CONFIRM, reason="won")]
        now = transport.clock()
        if isinstance(message, Heartbeat) and message.status not in (AgentStatus.RUNNING, AgentStatus.CLAIMED):
            at.setdefault("final", now)
            transport.held_still = False
        if not uploading(message):
            return []
        since = now - at.setdefault("first", now)
        if since >= release_at and not held.release.is_set():
            transport.held_still = True
            held.release.set()
        stops = []
        for message_id, published, within, moves, reason, *made in script(since):
            if made:
                transport.made_at[message_id] = at["first"] + made[0]
            order = ControlMessage(vm=VM, job_id="up", attempt=1, action=ControlAction.STOP, reason=reason)
            transport.published_at[message_id] = at["first"] + published
            stops.append(ControlDelivery(message_id, order.to_bytes(), {
                "vm": VM, "answer_within_s": f"{within:.0f}", MOVES: "1" if moves else "0"}, lambda: None))
        return stops

    transport.answer = zen
    transport.add_start(start_message("up", command=[sys.executable, "-c", WRITES], outputs="gs://out-bkt/r"))
    try:
        make_agent(transport, settings(tmp_path, heartbeat_s=10)).run()
    finally:
        held.release.set()
    return finals(transport)["up"], at["first"], at["final"]


def _once(heard: dict[str, float], key: str, since: float, when: bool = True) -> bool:
    """Whether Zen says it now: the first time ``when`` holds (kept in ``heard``: ``since``)."""
    if when and key not in heard:
        heard[key] = since
        return True
    return False


def test_an_older_stop_delivered_again_does_not_extend_a_preempted_jobs_deadline(client, storage, tmp_path):  # noqa: F811
    """Zen heard the upload's first RUNNING only (the later ones lost) and answered it with a STOP: it ends the
    attempt 120 s after that RUNNING. Pub/Sub delivers that STOP again 20 s later."""
    heard: dict[str, float] = {}

    def script(since: float):
        if _once(heard, "first", since):
            return [("stop-1", 0.0, PREEMPTED_STOP_S, True, TAKEN_BACK)]
        return [("stop-1", 0.0, PREEMPTED_STOP_S, True, TAKEN_BACK)] if _once(heard, "again", since, since >= 20) else []

    final, first, ended = _run(tmp_path, storage, script)

    assert (final.status, final.exit_code) == (AgentStatus.STOPPED, 0), final.message
    assert "cut when Zen's stop deadline came" in final.message
    assert ended - first <= PREEMPTED_STOP_S, "the final report came after Zen ended the attempt without it"


def test_an_older_stop_delivered_again_does_not_shorten_a_newer_stops_deadline(client, storage, tmp_path):  # noqa: F811
    """Zen heard the upload's first RUNNING and one 50 s later, and answered each: it waits until 120 s after the
    second. The first STOP, delivered again 10 s after that, must not bring the deadline back to its own (120 s
    after the first RUNNING): the upload, done 120 s after the first RUNNING, is not cut."""
    heard: dict[str, float] = {}

    def script(since: float):
        if _once(heard, "first", since):
            return [("stop-1", 0.0, PREEMPTED_STOP_S, True, TAKEN_BACK)]
        if _once(heard, "second", since, since >= 50):
            return [("stop-2", since, PREEMPTED_STOP_S, True, TAKEN_BACK)]
        return [("stop-1", 0.0, PREEMPTED_STOP_S, True, TAKEN_BACK)] if _once(heard, "again", since, since >= 60) else []

    final, first, ended = _run(tmp_path, storage, script, release_at=120)

    assert (final.status, final.exit_code) == (AgentStatus.SUCCEEDED, 0), final.message
    assert objects(client, "out-bkt") == {"r/up/attempt-1/result": b"r"}
    assert ended - first <= heard["second"] + PREEMPTED_STOP_S


def test_a_users_stop_held_back_counts_from_when_zen_made_it(client, storage, tmp_path):  # noqa: F811
    """A user's STOP made as the upload's first RUNNING came (Zen ends the job 120 s later), delivered 30 s late."""
    heard: dict[str, float] = {}

    def script(since: float):
        return [("user", 0.0, PREEMPTED_STOP_S, False, "not needed")] if _once(heard, "late", since, since >= 30) else []

    final, first, ended = _run(tmp_path, storage, script)

    assert (final.status, final.exit_code) == (AgentStatus.STOPPED, 0), final.message
    assert ended - first <= PREEMPTED_STOP_S, "the final report came after Zen ended the job without it"


def test_a_preempted_jobs_stop_the_outbox_published_twice_keeps_its_deadline(client, storage, tmp_path):  # noqa: F811
    """Zen made a STOP as the upload's first RUNNING came (it ends the attempt 120 s later); the outbox did not learn
    that Pub/Sub took it (a lost result) and its tick published it again 40 s later: a new Pub/Sub message, the same
    STOP (``answer_made``). Its later publish time must not push the deadline past Zen's."""
    heard: dict[str, float] = {}

    def script(since: float):
        if _once(heard, "first", since):
            return [("stop-1", 0.0, PREEMPTED_STOP_S, True, TAKEN_BACK, 0.0)]
        return ([("stop-1-resent", 40.0, PREEMPTED_STOP_S, True, TAKEN_BACK, 0.0)]
                if _once(heard, "resent", since, since >= 40) else [])

    final, first, ended = _run(tmp_path, storage, script)
    assert (final.status, final.exit_code) == (AgentStatus.STOPPED, 0), final.message
    assert ended - first <= PREEMPTED_STOP_S, "the final report came after Zen ended the attempt without it"


def test_a_users_stop_the_outbox_published_late_counts_from_when_zen_made_it(client, storage, tmp_path):  # noqa: F811
    """A user's STOP made as the upload's first RUNNING came (Zen ends the job 120 s later), whose publish failed:
    the outbox's next tick published it 40 s later."""
    heard: dict[str, float] = {}

    def script(since: float):
        return ([("user", 40.0, PREEMPTED_STOP_S, False, "not needed", 0.0)]
                if _once(heard, "late", since, since >= 40) else [])

    final, first, ended = _run(tmp_path, storage, script)

    assert (final.status, final.exit_code) == (AgentStatus.STOPPED, 0), final.message
    assert ended - first <= PREEMPTED_STOP_S, "the final report came after Zen ended the job without it"
