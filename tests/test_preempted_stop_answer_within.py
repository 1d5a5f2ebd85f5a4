"""The time a STOP gives its VM (``answer_within_s``) is the time Zen waits for the answer. A job its queue
takes back is STOPPING until its VM answers or ``Deadlines.preempted_stop_s`` passes (never before a VM cut off
from Zen has surely ended it, whatever a shorter ``stop_timeout_s`` says); the agent cuts the checkpoint's last
save and the outputs' upload to fit what the STOP says (``zen.agent.attempt``). The STOP said what was left of
``stop_timeout_s``: with ``stop_timeout_s: 30`` the VM cut the save the rerun resumes from at ~25 s while Zen
waited 120 s."""

from __future__ import annotations

import pytest

from tests.test_queues import RECLAIM, borrow_all_and_reclaim, statuses, with_queues
from zen.core.stops import made_at


@pytest.fixture
def short_stop_zen(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    deadlines = {**config.deadlines.model_dump(), "stop_timeout_s": 30}
    zen = Zen(with_queues(config, RECLAIM, deadlines=deadlines), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def test_a_preempted_jobs_stop_gives_its_vm_the_time_zen_waits_for_it(short_stop_zen, publisher, clock):
    zen, functions = short_stop_zen
    deadlines = zen.config.deadlines
    assert deadlines.stop_timeout_s == 30 and deadlines.preempted_stop_s == 120
    borrow_all_and_reclaim(functions, clock)
    assert statuses(zen, "a3") == ["STOPPING"]
    [stop] = [m for m in publisher.on("zen-vm-control")
              if m.attributes.get("job_id") == "a3" and m.attributes.get("action") == "STOP"]
    told = float(stop.attributes["answer_within_s"])
    assert told == pytest.approx(deadlines.preempted_stop_s, abs=1)
    assert stop.attributes["answer_moves"] == "1"  # Zen waits from the VM's last RUNNING: the latest STOP's deadline holds
    # What the wait counts from (the outbox may publish the STOP later, or twice: the agent counts from this)
    assert made_at(stop.attributes) == clock()
    clock.advance(told - 5)  # within what the VM was told: Zen still waits for its answer (its checkpoint)
    zen.on_scale_tick()
    assert statuses(zen, "a3") == ["STOPPING"]
    clock.advance(6)  # past it, unanswered: rerun
    zen.on_scale_tick()
    assert statuses(zen, "a3") == ["PENDING"]


def test_a_gangs_other_nodes_stopped_for_a_preempted_node_get_the_time_zen_waits(config, db, publisher, clock,
                                                                                 db_url, monkeypatch):
    from tests.test_gang_lifecycle import assembled, beat
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    deadlines = config.deadlines.model_copy(update={"stop_timeout_s": 30})
    zen = Zen(config.model_copy(update={"deadlines": deadlines}), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions = FunctionsInvoker(zen)
    assert deadlines.preempted_stop_s == 120
    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "PREEMPTED", 3)  # the gang reruns once vm-1 has stopped: it waits 120 s for it
    told = [m.attributes.get("answer_within_s") for m in publisher.on("zen-vm-control")
            if m.attributes["vm"] == "vm-1" and m.attributes["action"] == "STOP"]
    assert told == ["120"], told
    functions.stop({"job_id": "g", "reason": "not needed"})  # its user's stop: it ends at stop_timeout_s, told so
    told = [m.attributes.get("answer_within_s") for m in publisher.on("zen-vm-control")
            if m.attributes["vm"] == "vm-1" and m.attributes["action"] == "STOP"]
    assert told == ["120", "30"], told


def _stops(publisher) -> list[float]:
    return [float(m.attributes["answer_within_s"]) for m in publisher.on("zen-vm-control")
            if m.attributes.get("job_id") == "a3" and m.attributes.get("action") == "STOP"
            and "answer_within_s" in m.attributes]


def test_a_users_stop_during_a_preemption_does_not_end_the_job_before_the_time_its_vm_was_told(
        short_stop_zen, publisher, clock):
    """The user's stop brings Zen's wait back to stop_timeout_s; it sent no STOP, and Zen ended the job at 30 s
    while its VM, told 120 s, was still uploading what the job saved."""
    zen, functions = short_stop_zen
    borrow_all_and_reclaim(functions, clock)
    assert statuses(zen, "a3") == ["STOPPING"]
    told = _stops(publisher)
    assert told == [120.0], told  # what the preemption's STOP gave the VM (9fdb4b4)
    clock.advance(5)
    functions.stop({"job_id": "a3", "reason": "not needed after all"})  # its user's zen stop
    clock.advance(40)  # 45 s after the preemption's STOP: within the 120 s the VM was told
    zen.on_scale_tick()
    latest = _stops(publisher)[-1]  # the VM holds to the last deadline it was told
    # Its user's stop ends it sooner (CANCELLED at stop_timeout_s), and its VM was told so: a fresh STOP, 25 s.
    assert statuses(zen, "a3") == ["CANCELLED"] and latest == pytest.approx(30 - 5, abs=1), (statuses(zen, "a3"),
                                                                                          _stops(publisher))


def test_a_gangs_other_nodes_stopped_for_a_failed_node_are_told_their_deadline_moves(config, db, publisher, clock,
                                                                                   db_url, monkeypatch):
    """A node failed: Zen waits for the others from their last RUNNING (``preempted_stop_s``), each RUNNING answered
    with a STOP giving it all again; their reasons (``node 1 (vm-2) failed``, then the stop's) are no preemption's, so only the STOP's
    ``answer_moves`` tells the agent that its latest deadline holds (it held to the first: an upload, a checkpoint's
    last save cut while Zen still waited). A user's stop then fixes the deadline: "0", the earliest holds."""
    from tests.test_functions_lifecycle import controls
    from tests.test_gang_lifecycle import assembled, beat
    from zen.app import Zen
    from zen.core.stops import preempts
    from zen_dev.local.invoke import FunctionsInvoker

    deadlines = config.deadlines.model_copy(update={"stop_timeout_s": 30})
    zen = Zen(config.model_copy(update={"deadlines": deadlines}), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions = FunctionsInvoker(zen)
    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    beat(functions, "vm-2", "FAILED", 3, exit_code=1)
    clock.advance(100)
    beat(functions, "vm-1", "RUNNING", 4)  # its upload goes on: Zen waits for it again, from now

    def told():
        return [(m.attributes.get("answer_within_s"), m.attributes.get("answer_moves")) for m in
                publisher.on("zen-vm-control") if m.attributes["vm"] == "vm-1" and m.attributes["action"] == "STOP"]

    assert told() == [("120", "1"), ("120", "1")], told()
    reasons = [c["reason"] for c in controls(publisher, "vm-1") if c["action"] == "STOP"]
    assert reasons[0] == "node 1 (vm-2) failed" and not any(map(preempts, reasons)), reasons
    functions.stop({"job_id": "g", "reason": "not needed"})  # its user's stop: from its last RUNNING, 30 s, never more
    assert told()[2:] == [("30", "0")], told()
