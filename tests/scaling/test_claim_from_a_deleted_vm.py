"""A VM the tick scales down while its agent claims a job: the claim, sent before the drain, may be delivered
after the VM left its MIG and a pass forgot it (its drain mark goes with it). Won then, the job was ASSIGNED to a
VM that no longer exists: no VM could claim it, and it waited out the heartbeat timeout, its attempt spent, before
it ran. A claim from a VM Zen saw leave its MIG is refused as a drained VM's is: the job stays QUEUED, the same
attempt, its start published again (Compute stand-in, real Postgres, the functions)."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, _jobs, idle_after_a_job, stack, vm_beat  # noqa: F401
from zen.scaling.planner import ZenPlanner


class SubmitsDuringThePass:
    """The real planner; once, right after it planned, job ``b`` is submitted (another function instance's
    submission landing while the tick's pass holds the cluster)."""

    name = "zen"

    def __init__(self, submit):
        self.inner, self.submit, self.done = ZenPlanner(), submit, False

    def plan(self, snapshot):
        plan = self.inner.plan(snapshot)
        if not self.done:
            self.done = True
            self.submit()
        return plan


def test_a_claim_delivered_after_its_vm_left_its_mig_is_refused_and_spends_no_attempt(stack, clock, publisher):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = idle_after_a_job(fn, stack, clock)
    advance(zen.config.deadlines.idle_timeout_s + 1)
    manager = zen.scaler.manager(CLUSTER)
    manager.policy = SubmitsDuringThePass(lambda: fn.submit(job_request("b", regions=["us-west1"])))
    fn.tick()  # the pass planned with no job queued: the idle VM is drained and deleted; the rerun forgets it
    assert vm.name not in [i.name for i in instances("us-west1")]
    [b] = [j for j in _jobs(zen) if j.job_id == "b"]
    assert (b.status.value, b.attempt) == ("QUEUED", 1)

    # The VM's agent had pulled b's start and claimed it just before the drain; the claim arrives now.
    fn.heartbeat(heartbeat("b", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
    [b] = [j for j in _jobs(zen) if j.job_id == "b"]
    assert (b.status.value, b.attempt, b.vm) == ("QUEUED", 1, None)
    answers = [json.loads(m.data) for m in publisher.on("zen-vm-control")]
    assert [c["action"] for c in answers if (c["vm"], c["job_id"]) == (vm.name, "b")] == ["RELEASE"]

    # The VM asked for b boots and wins it, as the first attempt.
    advance(BOOT_S + 1)
    [new] = [i for i in instances("us-west1") if i.name != vm.name]
    fn.heartbeat(vm_beat(new.name, "us-west1", "IDLE", 1, sent_at=clock().isoformat()))
    fn.heartbeat(heartbeat("b", "CLAIMED", 1, vm=new.name, region="us-west1", zone=new.zone))
    [b] = [j for j in _jobs(zen) if j.job_id == "b"]
    assert (b.status.value, b.attempt, b.vm) == ("ASSIGNED", 1, new.name)
