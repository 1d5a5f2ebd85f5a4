"""A function instance serves several submissions at once (terraform: concurrency). A submission that an idle VM
covers takes that VM (``ClusterOrchestrator.covered``) and skips its pass; a pass that was planning meanwhile, from
a snapshot read before that job was queued, must not hand the VM out again as a spare when it ends: the next
submission was told it was provided for, got no pass and no VM, and waited for the next tick."""

from __future__ import annotations

import threading
from dataclasses import replace

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import CLUSTER, stack, vm_beat, vm_claiming  # noqa: F401 - the fixture


class PausedPlanner:
    """The cluster's own planner, held after its snapshot until ``go`` (a pass planning while others submit)."""

    def __init__(self, inner):
        self.inner, self.planning, self.go = inner, threading.Event(), threading.Event()

    def plan(self, view):
        self.planning.set()
        assert self.go.wait(30), "the paused pass was never let go"
        return self.inner.plan(view)


def test_a_spare_taken_while_a_pass_plans_is_not_offered_again(stack, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, _, instances = stack
    fn = FunctionsInvoker(zen)
    vm = vm_claiming(fn, stack)  # a runs on a us-west1 VM, then it sits idle
    fn.heartbeat(heartbeat("a", "SUCCEEDED", 2, vm=vm.name, region="us-west1", zone=vm.zone, exit_code=0))
    fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 100, sent_at=clock().isoformat()))
    manager = zen.scaler.manager(CLUSTER)
    manager._timing = replace(manager._timing, keep_factor=100)  # kept idle (up to idle_timeout_s)
    zen.on_scale_tick()  # its pass: one idle VM to spare, in us-west1
    assert zen.scaler._coverage[CLUSTER].spare == 1

    def asked() -> int:
        return sum(len(instances(region)) for region in ("us-central1", "us-west1", "europe-west4"))

    before = asked()
    paused = manager.policy = PausedPlanner(manager.policy)
    elsewhere = threading.Thread(target=fn.submit, args=(job_request("x", regions=["europe-west4"]),))
    elsewhere.start()  # no spare in its region: its own pass, which reads the cluster, then plans
    assert paused.planning.wait(30)
    fn.submit(job_request("b"))  # meanwhile: covered by the idle us-west1 VM, which b now takes
    paused.go.set()
    elsewhere.join(30)
    assert not elsewhere.is_alive()
    after_x = asked()
    assert after_x == before + 1  # x's VM, in europe-west4

    fn.submit(job_request("c"))  # the idle VM is b's: nothing provides for c, so its own pass asks for a VM
    assert asked() > after_x, "c was taken as covered by the VM b took: no VM asked for it"
