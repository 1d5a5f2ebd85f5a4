"""Several jobs per VM: the demand the planner sizes is in VMs there (``zen.scaling.sharing`` packs the queued jobs on
them), so its ADD and HOLD reasons say VMs: "2 queued job(s) without a VM" was read for four queued jobs packed two
per VM, and "1 job(s) wait" for two jobs left waiting that need one more VM."""

from __future__ import annotations

from tests.scaling.test_jobs_per_vm_scaling import config, two_gpus  # noqa: F401
from tests.scaling.test_scaling_integration import CLUSTER, stack  # noqa: F401


def _reasons(zen, action):
    with zen.db.transaction() as session:
        rows = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    return [r["reason"] for r in rows if r["action"] == action]


def test_add_reason_counts_the_vms_four_queued_jobs_two_per_vm_need(stack):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(two_gpus("sweep", array={"count": 4}))
    fn.tick()
    adds = _reasons(zen, "ADD")
    assert adds and all(r.startswith("2 VM(s) for queued jobs, several per VM") for r in adds), adds
    assert not any("queued job(s) without a VM" in r for r in adds), adds


def test_hold_reason_counts_the_vms_the_jobs_left_at_max_vms_need(stack):
    """max_vms 1: one 4-GPU VM of two slots takes two of the four 2-GPU tasks; the two left need one more VM."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    cluster = next(c for c in zen.config.clusters if c.name == CLUSTER)
    object.__setattr__(cluster, "max_vms", 1)  # the stack's config object, read by every pass
    fn = FunctionsInvoker(zen)
    fn.submit(two_gpus("sweep", array={"count": 4}))
    fn.tick()
    assert len(instances("us-west1")) == 1
    holds = _reasons(zen, "HOLD")
    assert holds and all(r.startswith("queued jobs for 1 VM(s) wait") for r in holds), holds
