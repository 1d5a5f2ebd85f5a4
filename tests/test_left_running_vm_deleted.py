"""A retired VM whose stopping job says its container may run on (LEFT_RUNNING) is held for it no more: the
tick's scaling pass must delete it (its deletion is what ends the container), not keep it as busy; a job its
queue took back is then rerun with the VM's silence."""

from __future__ import annotations

from tests.messages import heartbeat
from tests.scaling.test_scaling_integration import CLUSTER, stack, vm_beat, vm_claiming  # noqa: F401 - the fixture
from zen.core import gang
from zen.core.reports import LEFT_RUNNING
from zen.store import fleet


def _listed(instances, name: str) -> bool:
    return name in [i.name for i in instances("us-west1") if not i.deleting]


def _kept(zen, name: str) -> list[str]:
    with zen.db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    return [d["reason"] for d in decisions if d["vm"] == name and d["action"] == "HOLD"]


def test_the_tick_deletes_a_retired_vm_whose_stopping_job_says_its_container_may_run(stack):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = vm_claiming(fn, stack)
    fn.heartbeat(heartbeat("a", "RUNNING", 2, vm=vm.name, region="us-west1", zone=vm.zone))
    fn.stop({"job_id": "a"})
    fn.heartbeat(heartbeat("a", "RUNNING", 3, vm=vm.name, region="us-west1", zone=vm.zone, message=LEFT_RUNNING))
    fn.heartbeat(vm_beat(vm.name, "us-west1", "RETIRED", 5))
    with zen.db.transaction() as session:
        assert vm.name not in fleet.held_vms(session, CLUSTER)
        assert session.one("get_job", job_id="a")["status"] == "STOPPING"

    fn.tick()

    assert not _listed(instances, vm.name), _kept(zen, vm.name)


def test_a_job_its_queue_took_back_whose_container_may_run_is_rerun_once_its_retired_vm_is_gone(stack, clock, config):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = vm_claiming(fn, stack)
    fn.heartbeat(heartbeat("a", "RUNNING", 2, vm=vm.name, region="us-west1", zone=vm.zone))
    with zen.jobs._store.transaction() as tx:
        current = tx.get_job("a", lock=True)
        zen.jobs.decisions.apply(tx, current, gang.decide_preempt(current, "queue prod needs its quota", clock()),
                                 actor="admission", now=clock(), admit=False)
    # The agent: RUNNING (LEFT_RUNNING) every 30 s while its VM lives, RETIRED from the first (zen.agent.leftover).
    seq, vm_seq, steps = 3, 2, 0
    while _listed(instances, vm.name) and steps < 40:
        fn.heartbeat(heartbeat("a", "RUNNING", seq, vm=vm.name, region="us-west1", zone=vm.zone, message=LEFT_RUNNING))
        fn.heartbeat(vm_beat(vm.name, "us-west1", "RETIRED", vm_seq))
        vm_seq += 1
        advance(30)
        fn.tick()
        seq, steps = seq + 1, steps + 1
    with zen.db.transaction() as session:
        status = session.one("get_job", job_id="a")["status"]
    assert not _listed(instances, vm.name), (f"after {steps * 30} s the job is {status} and its VM still runs",
                                             _kept(zen, vm.name)[:1])
    assert status == "STOPPING"
    silent_s = 0
    for _ in range(int(2 * config.deadlines.preempted_stop_s // 30)):  # the VM gone: silent
        advance(30)
        silent_s += 30
        fn.tick()
        with zen.db.transaction() as session:
            row = session.one("get_job", job_id="a")
        if row["status"] != "STOPPING":
            break
    assert silent_s >= config.deadlines.preempted_stop_s - 30  # the last beat was up to 30 s before the deletion
    assert (row["status"], row["attempt"]) in {("QUEUED", 2), ("PENDING", 2), ("ASSIGNED", 2)}


def test_a_gangs_retired_node_vm_whose_container_may_run_can_be_drained(functions, zen, clock):
    from tests.test_gang_fates import running
    from tests.test_left_running_vm_released import _vm_beat

    running(functions)  # gang g: vm-1 and vm-2 (cluster 4xa100-40gb)
    functions.stop({"job_id": "g"})
    functions.heartbeat(heartbeat("g", "RUNNING", 5, vm="vm-2", message=LEFT_RUNNING))
    functions.heartbeat(_vm_beat("vm-2", 200, "RETIRED"))
    with zen.db.transaction() as session:
        assert "vm-2" not in fleet.held_vms(session, CLUSTER)  # the scaling pass plans its deletion
        drained = fleet.drain_unless_busy(session, "vm-2", CLUSTER, "us-central1", clock())
    assert drained  # which then goes through
