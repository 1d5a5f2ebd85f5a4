"""Room on busy VMs is supply (issue 15, a cluster's ``max_jobs_per_vm``): a queued job that fits
beside the jobs a VM runs boots no new VM; one that does not fit does. A VM holding a job is never
idle, so never deleted. First ``zen.scaling.sharing`` alone, then the manager through its recording
fakes, then end to end (Compute stand-in, real Postgres, the functions)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from tests.messages import heartbeat, job_request
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, _jobs, idle_after_a_job, stack, vm_beat  # noqa: F401
from zen.core.config import ClusterConfig, ZenConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import DemandGroup, Timing, Vm, VmPhase
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance
from zen.scaling.sharing import absorb

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
EARLY = NOW - timedelta(minutes=5)


def busy(name: str, region: str = "us-central1") -> Vm:
    return Vm(name, region, VmPhase.BUSY, NOW, job_id="j")


def row(jobs: int, gpus: int, regions=("us-central1",), priority: int = 0, oldest=NOW) -> dict:
    return {"priority": priority, "regions": list(regions), "gpus": gpus, "jobs": jobs, "oldest": oldest}


def test_jobs_that_fit_a_busy_vms_room_leave_the_demand_and_the_rest_stays_grouped():
    loads = {"half": (1, 4), "full": (2, 8)}
    vms = [busy("half"), busy("full")]

    # The 8-GPU VM with one 4-GPU job takes one more 4-GPU job; nothing fits the full one.
    assert absorb([row(1, 4)], loads, vms, 8, 2) == ()
    assert absorb([row(3, 4)], loads, vms, 8, 2) == (DemandGroup(("us-central1",), 1, NOW, 0),)  # the 2 left: 1 VM
    assert absorb([row(1, 8)], loads, vms, 8, 2) == (DemandGroup(("us-central1",), 1, NOW, 0),)
    # Room counts in the job's allowed regions only, and goes to the higher priority first.
    assert absorb([row(1, 4, regions=("us-west1",))], loads, vms, 8, 2) == (DemandGroup(("us-west1",), 1, NOW, 0),)
    assert absorb([row(1, 4, oldest=EARLY), row(1, 4, priority=5)], loads, vms, 8, 2) == (
        DemandGroup(("us-central1",), 1, EARLY, 0),)
    # A VM going away offers no room; slots run out before GPUs do.
    assert absorb([row(1, 4)], loads, [Vm("half", "us-central1", VmPhase.DELETING, NOW)], 8, 2) == (
        DemandGroup(("us-central1",), 1, NOW, 0),)
    assert absorb([row(2, 1)], {"one": (1, 1)}, [busy("one")], 8, 2) == (DemandGroup(("us-central1",), 1, NOW, 0),)
    # An idle VM is the planner's for one job: that one stays in the demand, the room beside it takes the rest.
    idle = [Vm("idle", "us-central1", VmPhase.IDLE, NOW)]
    assert absorb([row(3, 2)], {}, idle, 4, 2) == (DemandGroup(("us-central1",), 2, NOW, 0),)
    assert absorb([row(1, 2)], {}, idle, 4, 2) == (DemandGroup(("us-central1",), 1, NOW, 0),)
    assert absorb([row(2, 4)], {}, idle, 4, 2) == (DemandGroup(("us-central1",), 2, NOW, 0),)  # no room beside


class SharingFleet(FakeFleet):
    """The recording fleet, with the per-GPU demand and the VMs' loads a shared cluster also reads."""

    def __init__(self, facts: FleetFacts, queued: list[dict], loads: dict):
        super().__init__(facts, NOW)
        self.queued, self.loads, self.asked = queued, loads, 0

    def shared_load(self, cluster: str, now=None):
        self.asked += 1
        return self.queued, self.loads


def run_manager(*, max_jobs: int, queued_gpus: int, load: tuple[int, int]):
    calls: list = []
    instance = MigInstance("vm-1", "us-central1-a", "NONE", "RUNNING", None)
    migs = {"us-central1": RecordingMig("us-central1", calls, 1, [instance])}
    agents = {"vm-1": {"state": "BUSY", "idle_since": None, "last_seen_at": NOW}}
    facts = FleetFacts((DemandGroup(("us-central1",), 1, NOW, 0),), {"vm-1": "running-job"}, agents, {}, 0)
    fleet = SharingFleet(facts, [row(1, queued_gpus)], {"vm-1": load})
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=8, regions=["us-central1"],
                           max_vms_per_region=4, max_vms=4, max_jobs_per_vm=max_jobs)
    report = ClusterManager(config, fleet, migs, lambda: NOW, Timing(), ZenPlanner()).run()
    return report, fleet


def test_the_manager_boots_nothing_for_a_job_that_fits_beside_a_running_one():
    report, fleet = run_manager(max_jobs=2, queued_gpus=4, load=(1, 4))
    assert report.added == {} and report.deleted == [] and fleet.asked == 1


def test_the_manager_boots_a_vm_for_a_job_that_does_not_fit_or_when_vms_run_one_job_each():
    assert run_manager(max_jobs=2, queued_gpus=8, load=(1, 4))[0].added == {"us-central1": 1}
    report, fleet = run_manager(max_jobs=1, queued_gpus=4, load=(1, 8))
    assert report.added == {"us-central1": 1} and fleet.asked == 0  # the default reads nothing more


# -- end to end ------------------------------------------------------------------------------------------
@pytest.fixture
def config(project):
    """The test stack's cluster (4 GPUs per VM) running two jobs at once."""
    from zen.core.config import load_config

    raw = json.loads(load_config().model_copy(update={"project": project}).model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster["max_jobs_per_vm"] = 2
    return ZenConfig.model_validate(raw)


TWO_GPUS = dict(cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=2)


def two_gpus(job_id: str, **extra) -> dict:
    return job_request(job_id, regions=["us-west1"], **TWO_GPUS, **extra)


def test_a_vm_with_room_takes_the_next_job_and_no_vm_is_booted_until_one_does_not_fit(stack):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(two_gpus("a"))
    advance(BOOT_S + 1)
    [vm] = instances("us-west1")
    fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 1, jobs=[]))  # an agent that may run several says so
    fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))

    fn.submit(two_gpus("b"))  # 2 of the VM's 4 GPUs are free: it takes b
    fn.tick()
    assert [i.name for i in instances("us-west1")] == [vm.name]

    fn.heartbeat(heartbeat("b", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
    fn.submit(two_gpus("c"))  # the VM is full now: c needs a VM of its own
    fn.tick()
    assert len(instances("us-west1")) == 2

    advance(10_000)  # far past every idle timeout: the VM holding two jobs is never scaled down
    fn.heartbeat(heartbeat("a", "RUNNING", 2, vm=vm.name, region="us-west1"))
    fn.heartbeat(heartbeat("b", "RUNNING", 2, vm=vm.name, region="us-west1"))
    fn.tick()
    assert vm.name in [i.name for i in instances("us-west1") if not i.deleting]


def test_the_simulator_refuses_several_jobs_per_vm_it_does_not_model():
    from zen_dev.sim.scenario import ClusterSpec

    with pytest.raises(ValueError, match="the simulator runs one job per VM"):
        ClusterSpec(name="c", gpu_count=8, regions=["r"], max_vms_per_region=1, max_vms=1, max_jobs_per_vm=2)


def test_an_idle_vm_with_room_for_two_jobs_boots_no_vm_for_the_second(stack, clock):
    """An idle VM was supply for one job only (room was counted on busy VMs alone): an array of two that the
    idle VM took whole booted a VM for the second task, which then went idle, billed for nothing."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = idle_after_a_job(fn, stack, clock, jobs=[], **TWO_GPUS)
    advance(15)  # the last pass's view is no longer trusted: the next submission runs a pass
    fn.submit(two_gpus("sweep", array={"count": 2}))  # the idle 4-GPU VM, two slots, takes both
    for n, task in enumerate(("sweep-0", "sweep-1"), start=1):
        fn.heartbeat(heartbeat(task, "CLAIMED", n, vm=vm.name, region="us-west1", zone=vm.zone))
    assert {j.job_id: j.status.value for j in _jobs(zen) if j.job_id.startswith("sweep")} == {
        "sweep-0": "ASSIGNED", "sweep-1": "ASSIGNED"}
    assert [i.name for i in instances("us-west1")] == [vm.name]


def test_a_busy_vm_that_runs_one_job_at_a_time_is_no_room_for_a_queued_job(stack, clock):
    """Raising a cluster's ``max_jobs_per_vm`` on a live fleet (docs/reference/configuration.md, "Upgrading: ...
    then raise max_jobs_per_vm above 1"): the new value reaches the VMs through their instance template's
    ``zen-max-jobs-per-vm`` attribute, which a VM reads when it boots (MIGs update opportunistically), so a VM
    booted before the change runs one job at a time, and says so: its VM heartbeats carry no ``jobs`` list
    (``VmBeats.beat``: ``list_all`` only when its capacity is shared). Zen's scaling counted the room of such a
    busy VM as supply for the queued jobs that fit it (``zen.scaling.sharing.absorb``, from the cluster's
    configuration alone), so no VM was booted for them, while the VM never pulls one until its job ends: the
    queued job waited for as long as that job ran (hours, for a training job). Only VMs whose agents list their
    jobs (``shares``) offer room now."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(two_gpus("a"))
    advance(BOOT_S + 1)
    [vm] = instances("us-west1")
    # The VM's agent runs one job at a time (its template's zen-max-jobs-per-vm was 1 when it booted): its
    # VM heartbeats never name a `jobs` list, unlike an agent that may run several (which sends `jobs`).
    fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 1, sent_at=clock().isoformat()))
    fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
    fn.heartbeat(heartbeat("a", "RUNNING", 2, vm=vm.name, region="us-west1", zone=vm.zone))
    fn.heartbeat({**vm_beat(vm.name, "us-west1", "BUSY", 3, sent_at=clock().isoformat()),
                  "job_id": "a", "attempt": 1})

    fn.submit(two_gpus("b"))  # the VM will not pull it while "a" runs
    fn.tick()
    advance(BOOT_S + 1)
    fn.tick()

    assert len(instances("us-west1")) == 2, (
        "no VM was booted for b: the busy VM's 2 free GPUs were counted as room, though it runs one job at a "
        "time and takes nothing until a ends")
