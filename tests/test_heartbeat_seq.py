"""A heartbeat's ``seq`` is bounded by Zen's clock (``zen.core.vm_heartbeat.check_seq``): only a higher
``seq`` changes a job's or a VM's row, so one message with a huge ``seq`` made every later report a
duplicate. Such a message is rejected with the reason, recorded and acked; the real reports apply."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from zen.store import repository

INT64_MAX = 2**63 - 1


def ms(clock) -> int:
    return int(clock().timestamp() * 1000)


def vm_beat(state: str, seq: int, sent_at: datetime) -> dict:
    return {"version": 1, "kind": "vm", "vm": "vm-b", "cluster": "4xa100-40gb", "region": "us-central1",
            "zone": "us-central1-a", "state": state, "seq": seq,
            "sent_at": sent_at.isoformat()}


def rejections(zen) -> list[str]:
    with zen.db.transaction() as session:
        return [row["reason"] for row in repository.list_rejections(session)]


def vm_row(zen, name: str) -> dict:
    with zen.db.transaction() as session:
        return next(row for row in repository.list_vms(session) if row["name"] == name)


def test_a_seq_far_ahead_of_zen_clock_is_rejected_and_the_real_reports_apply(functions, zen, clock):
    functions.submit(job_request("victim"))
    start = ms(clock)
    functions.heartbeat(heartbeat("victim", "CLAIMED", start, vm="vm-a"))
    functions.heartbeat(heartbeat("victim", "RUNNING", start + 1, vm="vm-a"))
    assert functions.heartbeat(heartbeat("victim", "RUNNING", INT64_MAX, vm="vm-a")).status_code == 200
    functions.heartbeat(heartbeat("victim", "SUCCEEDED", start + 2, vm="vm-a", exit_code=0))
    assert job(zen, "victim").status.value == "SUCCEEDED"
    [reason] = rejections(zen)
    assert f"seq {INT64_MAX} is more than 300 s ahead of Zen's clock" in reason


def test_a_seq_a_little_ahead_is_accepted(functions, zen, clock):
    functions.submit(job_request("skewed"))
    functions.heartbeat(heartbeat("skewed", "CLAIMED", ms(clock) + 60_000, vm="vm-a"))  # a clock 1 min ahead
    assert job(zen, "skewed").status.value == "ASSIGNED" and rejections(zen) == []


def test_a_vm_heartbeat_far_ahead_does_not_freeze_the_vm_row(functions, zen, clock):
    start = ms(clock)
    functions.heartbeat(vm_beat("IDLE", start, clock()))
    functions.heartbeat(vm_beat("RETIRED", INT64_MAX, clock()))
    functions.heartbeat(vm_beat("IDLE", start + 1, clock()))
    assert vm_row(zen, "vm-b")["state"] == "IDLE"
    with zen.db.transaction() as session:
        assert not repository.vm_is_draining(session, "vm-b", start + 2)
    assert len(rejections(zen)) == 1


def test_idle_since_is_never_later_than_zen_clock(functions, zen, clock):
    functions.heartbeat(vm_beat("IDLE", ms(clock), clock() + timedelta(hours=2)))
    assert vm_row(zen, "vm-b")["idle_since"] == clock()


def test_a_claim_drawn_after_its_vms_retired_word_is_a_new_agents(functions, zen, clock, publisher):
    """A VM's agent retired (its pull limit); its MIG recreated the VM under the same name after a preemption,
    and the new agent's first claim came before its first VM heartbeat: the old RETIRED made the claim
    "being scaled down", which retires the new agent too, and the VM its region gave back was lost. A claim
    drawn before the word is still refused."""
    def last_order() -> dict:
        return [m.attributes for m in publisher.on("zen-vm-control") if m.attributes.get("vm") == "vm-b"][-1]

    start = ms(clock)
    functions.heartbeat(vm_beat("RETIRED", start, clock()))
    functions.submit(job_request("old"))
    functions.heartbeat(heartbeat("old", "CLAIMED", start - 1_000, vm="vm-b"))  # drawn before it retired
    assert (last_order()["action"], last_order().get("refused")) == ("RELEASE", "draining")
    clock.advance(600)
    functions.submit(job_request("new"))
    functions.heartbeat(heartbeat("new", "CLAIMED", ms(clock), vm="vm-b"))
    assert job(zen, "new").status.value == "ASSIGNED" and last_order()["action"] == "CONFIRM"
