"""The decisions recorded for ``zen explain`` say what apply did: an ADD capped by a limit counts the
VMs added and says why the rest were not, one that failed or added nothing is a HOLD that says so,
and a planned DELETE refused because the VM took a job (or whose delete failed) is not a DELETE."""

from __future__ import annotations

from tests.scaling.test_manager_apply import manager
from zen.scaling.model import Action, Decision, Plan
from zen.scaling.port import MigApiError


def recorded(fleet) -> list[Decision]:
    return fleet.recorded[-1][1]


def test_a_capped_add_records_the_vms_added_and_why_not_the_rest():
    m, _, fleet = manager(Plan(add={"us-central1": 5},
                               decisions=[Decision(Action.ADD, "us-central1", "5 queued job(s) without a VM", 5)]))
    assert m.run().added == {"us-central1": 1}  # 2 there, at most 3 per region
    [add] = recorded(fleet)
    assert (add.action, add.count) == (Action.ADD, 1)
    assert "1 of 5 added: the per-MIG limit (max_vms_per_region) reached" in add.reason


def test_an_add_stopped_by_the_cluster_limit_is_a_hold_that_says_so():
    m, _, fleet = manager(Plan(add={"us-west1": 2}, decisions=[Decision(Action.ADD, "us-west1", "a hedge", 2)]),
                          max_vms=2)
    assert m.run().added == {}
    [hold] = recorded(fleet)
    assert (hold.action, hold.region, hold.count) == (Action.HOLD, "us-west1", 2)
    assert "not added: the cluster limit of 2 VMs reached" in hold.reason


def test_a_failed_resize_is_recorded_as_not_added():
    m, _, fleet = manager(Plan(add={"us-west1": 1}, decisions=[Decision(Action.ADD, "us-west1", "1 job", 1)]))

    def fail(size, together=()):
        raise MigApiError("503 backend error")

    m.mig("us-west1").resize = fail
    m.run()
    [hold] = recorded(fleet)
    assert hold.action is Action.HOLD and "resize failed: 503 backend error" in hold.reason


def test_a_deletion_refused_because_the_vm_took_a_job_is_not_recorded_as_a_delete():
    plan = Plan(delete=[("us-central1", "a"), ("us-central1", "b")],
                decisions=[Decision(Action.DELETE, "us-central1", "idle for 99s", vm="a"),
                           Decision(Action.DELETE, "us-central1", "idle for 99s", vm="b")])
    m, _, fleet = manager(plan, held={"a": "job-1"})
    report = m.run()
    assert report.kept_busy == ["a"] and report.deleted == ["b"]
    kept, deleted = recorded(fleet)
    assert (kept.action, kept.vm) == (Action.HOLD, "a") and "took a job" in kept.reason
    assert (deleted.action, deleted.vm) == (Action.DELETE, "b")
