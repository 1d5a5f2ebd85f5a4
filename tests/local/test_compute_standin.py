"""The Compute stand-in, driven only through the official google-cloud-compute clients (REST).

Cloud time comes from a ManualClock, so boots, retries and preemptions happen when a test moves
the clock; the only real waits are for VM startup processes, each bounded by a timeout.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1
from google.cloud.compute_v1.services.instance_group_managers.transports.rest import (
    InstanceGroupManagersRestTransport,
)
from google.cloud.compute_v1.services.region_instance_group_managers.transports.rest import (
    RegionInstanceGroupManagersRestTransport,
)

from tests.waiting import wait_for
from zen_dev.local.compute import ComputeStandIn, ManualClock
from zen_dev.local.compute.client import compute_clients

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO.parent / "shared" / "traces" / "gcp-a100-availability" / "us-west1-b_a100_40gb_8.json"
PROJECT, REGION, MIG = "test-proj", "us-central1", "zen-4xa100-us-central1"
ZONES = [f"{REGION}-a", f"{REGION}-b", f"{REGION}-c"]
BOOT_S = 60

BASE = {
    "project": PROJECT,
    "seed": 3,
    "migs": [{"name": MIG, "region": REGION, "machine_type": "a2-highgpu-4g", "cluster": "4xa100"}],
    "timings": {"boot": {"dist": "fixed", "s": BOOT_S}, "retry_interval_s": 30, "delete_s": 20, "preempt_stop_s": 10},
    "startup": {"stop_grace_s": 2},
}


def merged(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Cloud:
    """A started stand-in plus official clients and a few helpers for the tests."""

    def __init__(self, standin: ComputeStandIn):
        self.standin = standin
        self.migs, self.ops = compute_clients(standin.endpoint)

    def advance(self, seconds: float) -> None:
        self.standin.advance(seconds)

    def kw(self, mig: str = MIG, region: str = REGION) -> dict:
        return {"project": PROJECT, "region": region, "instance_group_manager": mig}

    def resize(self, size: int, **kw):
        op = self.migs.resize(size=size, **self.kw(**kw))
        op.result(timeout=10)
        return op

    def instances(self, **kw) -> list:
        return list(self.migs.list_managed_instances(**self.kw(**kw)))

    def maintenance_event(self, name: str, zone: str) -> None:
        """``instances.simulateMaintenanceEvent`` on the VM ``name`` in ``zone``, through the official client."""
        from google.cloud.compute_v1.services.instances.transports.rest import InstancesRestTransport

        instances = compute_v1.InstancesClient(transport=InstancesRestTransport(
            host=self.standin.endpoint, credentials=AnonymousCredentials(), url_scheme="http"))
        instances.simulate_maintenance_event_unary(project=PROJECT, zone=zone, instance=name)

    def maintenance(self, inst) -> None:
        """``maintenance_event`` on a managed instance, as ``instances()`` lists it."""
        self.maintenance_event(inst.name, inst.instance.split("/zones/")[1].split("/")[0])

    def errors(self, **kw) -> list:
        return list(self.migs.list_errors(**self.kw(**kw)))

    def delete(self, refs: list[str], skip: bool = False, **kw):
        body = compute_v1.RegionInstanceGroupManagersDeleteInstancesRequest(
            instances=refs, skip_instances_on_validation_error=skip
        )
        op = self.migs.delete_instances(
            region_instance_group_managers_delete_instances_request_resource=body, **self.kw(**kw)
        )
        op.result(timeout=10)
        return op

    def target_size(self, **kw) -> int:
        return self.migs.get(**self.kw(**kw)).target_size


@pytest.fixture
def make_cloud(tmp_path):
    started: list[ComputeStandIn] = []

    def make(extra: dict | None = None, base: dict = BASE) -> Cloud:
        scenario = merged(base, extra or {})
        standin = ComputeStandIn(scenario, clock=ManualClock(), log_dir=tmp_path / "vm-logs")
        started.append(standin.start())
        return Cloud(standin)

    yield make
    for standin in started:
        standin.stop()


def by_state(instances) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for i in instances:
        key = (i.current_action, i.instance_status)
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_get_and_list_migs(make_cloud):
    cloud = make_cloud()
    mig = cloud.migs.get(**cloud.kw())
    assert mig.name == MIG and mig.target_size == 0
    assert mig.region.endswith(f"/projects/{PROJECT}/regions/{REGION}")
    assert [z.zone.rsplit("/", 1)[1] for z in mig.distribution_policy.zones] == ZONES
    assert mig.status.is_stable
    assert [m.name for m in cloud.migs.list(project=PROJECT, region=REGION)] == [MIG]
    assert list(cloud.migs.list(project=PROJECT, region="europe-west4")) == []
    zonal = compute_v1.InstanceGroupManagersClient(transport=InstanceGroupManagersRestTransport(
        host=cloud.standin.endpoint, credentials=AnonymousCredentials(), url_scheme="http"))
    aggregated = dict(zonal.aggregated_list(project=PROJECT))  # regional MIGs appear as regions/R
    assert [m.name for m in aggregated[f"regions/{REGION}"].instance_group_managers] == [MIG]


def test_resize_creates_instances_that_boot_after_the_delay(make_cloud):
    cloud = make_cloud()
    op = cloud.resize(3)
    assert op.status == compute_v1.Operation.Status.DONE and op.name.startswith("operation-")
    assert cloud.target_size() == 3
    instances = cloud.instances()
    assert len(instances) == 3
    assert all(re.fullmatch(rf"{MIG}-[a-z0-9]{{4}}", i.name) for i in instances)
    assert all(i.instance.endswith(f"/instances/{i.name}") for i in instances)
    assert sorted(i.instance.split("/zones/")[1].split("/")[0] for i in instances) == ZONES  # spread evenly
    assert by_state(instances) == {("CREATING", "PROVISIONING"): 3}
    assert not cloud.migs.get(**cloud.kw()).status.is_stable

    cloud.advance(BOOT_S - 1)
    assert by_state(cloud.instances()) == {("CREATING", "STAGING"): 3}
    cloud.advance(1)
    after = cloud.instances()
    assert by_state(after) == {("NONE", "RUNNING"): 3}
    assert [i.name for i in after] == [i.name for i in instances]
    mig = cloud.migs.get(**cloud.kw())
    assert mig.status.is_stable and mig.current_actions.none == 3
    assert cloud.errors() == []


def test_stockout_keeps_instances_creating_until_capacity_returns(make_cloud):
    schedule = [{"at_s": 0, "zone": z, "capacity": 0} for z in ZONES] + [
        {"at_s": 600, "zone": f"{REGION}-b", "machine_type": "a2-highgpu-4g", "capacity": 1},
    ]
    cloud = make_cloud({"capacity": {"schedule": schedule}})
    cloud.resize(2)
    instances = cloud.instances()
    assert by_state(instances) == {("CREATING", ""): 2}
    for i in instances:
        assert [e.code for e in i.last_attempt.errors.errors] == ["ZONE_RESOURCE_POOL_EXHAUSTED"]
    errors = cloud.errors()
    assert len(errors) == 2
    assert {e.instance_action_details.instance for e in errors} == {i.instance for i in instances}
    assert all(e.error.code == "ZONE_RESOURCE_POOL_EXHAUSTED" and e.instance_action_details.action == "CREATING"
               for e in errors)
    assert all(e.timestamp for e in errors)

    cloud.advance(90)  # retries at 30, 60, 90 cloud seconds: one error each per instance
    assert len(cloud.errors()) == 2 * 4
    assert by_state(cloud.instances()) == {("CREATING", ""): 2}

    cloud.advance(600 - 90)  # zone b gets room for one VM; the retry at t=600 takes it
    instances = cloud.instances()
    placed = [i for i in instances if i.instance_status]
    assert len(placed) == 1 and "/zones/us-central1-b/" in placed[0].instance
    assert not placed[0].last_attempt.errors.errors
    cloud.advance(BOOT_S)
    assert by_state(cloud.instances()) == {("NONE", "RUNNING"): 1, ("CREATING", ""): 1}
    (waiting,) = [i for i in cloud.instances() if not i.instance_status]
    cloud.delete([waiting.instance])  # no VM yet: it goes at once
    assert [i.name for i in cloud.instances()] == [placed[0].name] and cloud.target_size() == 1


def test_capacity_returning_boots_waiting_instances(make_cloud):
    schedule = [{"at_s": 0, "zone": z, "capacity": 0} for z in ZONES]
    schedule += [{"at_s": 300, "zone": z, "capacity": "unlimited"} for z in ZONES]
    cloud = make_cloud({"capacity": {"schedule": schedule}})
    cloud.resize(3)
    cloud.advance(299)
    assert by_state(cloud.instances()) == {("CREATING", ""): 3}
    errors_before = len(cloud.errors())
    cloud.advance(31 + BOOT_S)  # next retry after t=300 is at t=300
    assert by_state(cloud.instances()) == {("NONE", "RUNNING"): 3}
    assert len(cloud.errors()) == errors_before


def test_delete_instances_removes_exactly_those_and_lowers_target_size(make_cloud):
    cloud = make_cloud()
    cloud.resize(4)
    cloud.advance(BOOT_S)
    instances = cloud.instances()
    doomed = [instances[0], instances[2]]
    kept = {instances[1].name, instances[3].name}
    with pytest.raises(gexc.BadRequest, match="Expected a URL"):  # a bare name fails the whole call, as in Compute
        cloud.delete([doomed[0].instance, doomed[1].name])
    cloud.delete([doomed[0].instance, "zones/" + doomed[1].instance.split("/zones/")[1]])  # a URL, a partial one
    assert cloud.target_size() == 2
    states = {i.name: (i.current_action, i.instance_status) for i in cloud.instances()}
    assert states == {
        doomed[0].name: ("DELETING", "STOPPING"), doomed[1].name: ("DELETING", "STOPPING"),
        **{name: ("NONE", "RUNNING") for name in kept},
    }
    cloud.advance(20)
    assert {i.name for i in cloud.instances()} == kept
    cloud.delete([doomed[0].instance], skip=True)  # already gone: skipped, nothing changes
    assert cloud.target_size() == 2 and len(cloud.instances()) == 2


def test_bad_requests_raise_bad_request(make_cloud):
    cloud = make_cloud()
    cloud.resize(1)
    with pytest.raises(gexc.BadRequest, match="size"):
        cloud.migs.resize(size=-1, **cloud.kw())
    with pytest.raises(gexc.BadRequest, match="not a member"):
        cloud.delete([f"zones/{REGION}-a/instances/{MIG}-zzzz"])
    assert cloud.target_size() == 1 and len(cloud.instances()) == 1


def test_unknown_mig_or_project_is_not_found(make_cloud):
    cloud = make_cloud()
    with pytest.raises(gexc.NotFound):
        cloud.migs.get(**cloud.kw(mig="zen-nope-us-central1"))
    with pytest.raises(gexc.NotFound):
        cloud.migs.resize(size=1, **cloud.kw(mig="zen-nope-us-central1"))
    with pytest.raises(gexc.NotFound):
        cloud.instances(mig=MIG, region="us-east1")
    with pytest.raises(gexc.NotFound):
        cloud.migs.get(**(cloud.kw() | {"project": "other-project"}))
    with pytest.raises(gexc.MethodNotImplemented):
        cloud.migs.abandon_instances(
            region_instance_group_managers_abandon_instances_request_resource=
            compute_v1.RegionInstanceGroupManagersAbandonInstancesRequest(instances=[]),
            **cloud.kw(),
        )


def test_rate_limited_calls_are_refused_403_rate_limit_exceeded_as_compute_engine_does(make_cloud):
    cloud = make_cloud({"faults": {"rate_limit": {"windows": [{"from_s": 0, "to_s": 100}], "methods": ["get"]}}})
    with pytest.raises(gexc.Forbidden) as refused:
        cloud.migs.get(**cloud.kw())
    assert refused.value.errors[0]["reason"] == "rateLimitExceeded"
    assert cloud.instances() == []  # other methods are not limited
    cloud.advance(100)
    assert cloud.migs.get(**cloud.kw()).name == MIG

    everything = make_cloud({"faults": {"rate_limit": {"fraction": 1.0}}})
    with pytest.raises(gexc.Forbidden):
        everything.migs.resize(size=1, **everything.kw())


def test_an_outage_answers_503_in_its_region_and_window_only(make_cloud):
    cloud = make_cloud({"faults": {"unavailable": [{"region": REGION, "to_s": 100, "methods": ["get"]}]}})
    with pytest.raises(gexc.ServiceUnavailable) as refused:
        cloud.migs.get(**cloud.kw(), retry=None)  # the client's default retries a 503 for 600 s
    assert refused.value.errors[0]["reason"] == "backendError" and cloud.standin.outages.refused == 1
    assert cloud.instances() == []  # other methods answer
    with pytest.raises(gexc.NotFound):  # other regions answer (this one has no such MIG)
        cloud.migs.get(**cloud.kw(region="us-west1"), retry=None)
    cloud.advance(100)
    assert cloud.migs.get(**cloud.kw(), retry=None).name == MIG


def test_quota_exceeded_is_a_creation_error(make_cloud):
    quota = [{"region": REGION, "machine_type": "a2-highgpu-4g", "limit": 1, "metric": "NVIDIA_A100_GPUS"}]
    cloud = make_cloud({"faults": {"quota": quota}})
    cloud.resize(2)
    instances = cloud.instances()
    assert by_state(instances) == {("CREATING", "PROVISIONING"): 1, ("CREATING", ""): 1}
    (error,) = cloud.errors()
    assert error.error.code == "QUOTA_EXCEEDED" and "NVIDIA_A100_GPUS" in error.error.message


def test_resize_down_removes_instances_without_a_vm_first(make_cloud):
    cloud = make_cloud({"capacity": {"default": 0, "schedule": [{"at_s": 0, "zone": f"{REGION}-a", "capacity": 1}]}})
    cloud.resize(3)
    booting = [i.name for i in cloud.instances() if i.instance_status]
    assert len(booting) == 1
    cloud.resize(1)
    assert [i.name for i in cloud.instances()] == booting
    assert cloud.target_size() == 1


def test_paging_and_request_ids(make_cloud):
    cloud = make_cloud()
    cloud.resize(5)
    request = compute_v1.ListManagedInstancesRegionInstanceGroupManagersRequest(
        max_results=2, **cloud.kw())
    pages = list(cloud.migs.list_managed_instances(request=request).pages)
    assert [len(p.managed_instances) for p in pages] == [2, 2, 1]
    request_id = "0b6f7d0e-0000-4000-8000-000000000001"
    Resize = compute_v1.ResizeRegionInstanceGroupManagerRequest
    first = cloud.migs.resize(request=Resize(size=2, request_id=request_id, **cloud.kw()))
    again = cloud.migs.resize(request=Resize(size=7, request_id=request_id, **cloud.kw()))
    assert again.name == first.name and cloud.target_size() == 2  # a retried request is not re-applied


def test_operations_that_take_time_are_polled_through_region_operations(make_cloud):
    cloud = make_cloud({"api": {"operation_delay_s": 20}})
    op = cloud.migs.resize(size=1, **cloud.kw())
    assert op.status == compute_v1.Operation.Status.RUNNING and not op.done()
    got = cloud.ops.get(project=PROJECT, region=REGION, operation=op.name)
    assert got.status == compute_v1.Operation.Status.RUNNING and got.target_link.endswith(f"/{MIG}")
    cloud.advance(20)
    assert op.done() and op.result(timeout=5) is None
    waited = cloud.ops.wait(project=PROJECT, region=REGION, operation=op.name)
    assert waited.status == compute_v1.Operation.Status.DONE
    with pytest.raises(gexc.NotFound):
        cloud.ops.get(project=PROJECT, region=REGION, operation="operation-missing")


def test_a_scaled_clock_runs_the_world_in_real_time(tmp_path):
    scenario = merged(BASE, {"time_scale": 600})  # boot: 60 cloud s = 0.1 real s
    with ComputeStandIn(scenario, log_dir=tmp_path / "vm-logs", tick_interval_s=0.01) as standin:
        migs, _ = compute_clients(standin.endpoint)
        kw = {"project": PROJECT, "region": REGION, "instance_group_manager": MIG}
        migs.resize(size=2, **kw).result(timeout=5)
        wait_for(lambda: all(i.instance_status == "RUNNING" for i in migs.list_managed_instances(**kw)),
                   timeout_s=5, what="VMs to boot in real time")


def test_the_handbook_recipe_works_for_resize_result(make_cloud):
    cloud = make_cloud()
    transport = RegionInstanceGroupManagersRestTransport(
        host=cloud.standin.endpoint, credentials=AnonymousCredentials(), url_scheme="http")
    client = compute_v1.RegionInstanceGroupManagersClient(transport=transport)
    assert client.resize(size=2, **cloud.kw()).result(timeout=5) is None
    assert client.get(**cloud.kw()).target_size == 2


STARTUP_SCRIPT = textwrap.dedent("""
    import json, os, signal, sys, time
    out = sys.argv[1]
    name = os.environ["ZEN_VM_NAME"]
    keys = ["ZEN_VM_NAME", "ZEN_CLUSTER", "ZEN_REGION", "ZEN_ZONE", "ZEN_PROJECT", "ZEN_MIG", "EXTRA", "PATH"]
    def on_term(*_):
        open(os.path.join(out, name + ".terminated"), "a").write("%d\\n" % os.getpid())
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    env = {k: os.environ.get(k) for k in keys}
    with open(os.path.join(out, name + ".starts"), "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "env": env}) + "\\n")
    print("hello from", name, flush=True)
    time.sleep(120)
""")


def startup_extra(out: Path) -> dict:
    return {"startup": {"command": [sys.executable, "-c", STARTUP_SCRIPT, str(out)], "env": {"EXTRA": "yes"}}}


def starts(out: Path, name: str) -> list[dict]:
    path = out / f"{name}.starts"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_startup_command_runs_with_the_vm_env_and_stops_with_the_server(make_cloud, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    cloud = make_cloud(startup_extra(out))
    cloud.resize(1)
    (inst,) = cloud.instances()
    cloud.advance(BOOT_S - 1)
    time.sleep(0.1)
    assert starts(out, inst.name) == []  # nothing runs before the VM has booted
    cloud.advance(1)
    (record,) = wait_for(lambda: starts(out, inst.name), what="the startup command")
    zone = inst.instance.split("/zones/")[1].split("/")[0]
    assert record["env"] | {"PATH": None} == {
        "ZEN_VM_NAME": inst.name, "ZEN_CLUSTER": "4xa100", "ZEN_REGION": REGION, "ZEN_ZONE": zone,
        "ZEN_PROJECT": PROJECT, "ZEN_MIG": MIG, "EXTRA": "yes", "PATH": None,
    }
    assert record["env"]["PATH"] == os.environ.get("PATH")  # the parent env is kept
    log = tmp_path / "vm-logs" / f"{inst.name}.log"
    wait_for(lambda: log.exists() and "hello from" in log.read_text(), what="the VM log")
    assert cloud.standin.vm_pid(inst.name) == record["pid"]
    cloud.standin.stop()
    assert not pid_alive(record["pid"])
    assert (out / f"{inst.name}.terminated").exists()  # it got SIGTERM first


def test_preemption_kills_the_vm_and_the_mig_recreates_it(make_cloud, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    cloud = make_cloud(startup_extra(out) | {"faults": {"preemptions": {"at": [{"at_s": 100, "mig": MIG}]}}})
    cloud.resize(1)
    cloud.advance(BOOT_S)
    (inst,) = cloud.instances()
    (first,) = wait_for(lambda: starts(out, inst.name), what="the first boot")
    cloud.advance(100 - BOOT_S)
    (preempted,) = cloud.instances()
    assert (preempted.current_action, preempted.instance_status) == ("RECREATING", "STOPPING")
    wait_for(lambda: not pid_alive(first["pid"]), what="the preempted process to end")
    assert (out / f"{inst.name}.terminated").read_text().split() == [str(first["pid"])]
    assert cloud.target_size() == 1

    cloud.advance(10)  # after preempt_stop_s the MIG recreates it (capacity is unlimited)
    (again,) = cloud.instances()
    assert again.name == inst.name and again.current_action == "RECREATING"
    assert again.instance_status == "PROVISIONING" and again.id != inst.id
    cloud.advance(BOOT_S)
    (running,) = cloud.instances()
    assert (running.current_action, running.instance_status) == ("NONE", "RUNNING")
    records = wait_for(lambda: len(starts(out, inst.name)) == 2 and starts(out, inst.name), what="a second boot")
    assert records[1]["pid"] != first["pid"] and pid_alive(records[1]["pid"])


def test_preemption_can_remove_the_instance_instead(make_cloud):
    cloud = make_cloud({"faults": {"preemptions": {"recreate": False, "at": [{"at_s": 70, "zone": f"{REGION}-a"}]}}})
    cloud.resize(3)
    cloud.advance(70)
    assert cloud.target_size() == 2
    cloud.advance(10)
    instances = cloud.instances()
    assert len(instances) == 2 and all("/zones/us-central1-a/" not in i.instance for i in instances)


def test_falling_capacity_preempts_only_when_asked(make_cloud):
    schedule = [{"at_s": 0, "zone": z, "capacity": 2} for z in ZONES]
    schedule += [{"at_s": 200, "zone": z, "capacity": 0} for z in ZONES]
    keep = make_cloud({"capacity": {"schedule": schedule}})
    keep.resize(3)
    keep.advance(300)
    assert by_state(keep.instances()) == {("NONE", "RUNNING"): 3}  # running VMs keep running

    drop = make_cloud({"capacity": {"schedule": schedule},
                       "faults": {"preemptions": {"when_capacity_drops": True}}})
    drop.resize(3)
    drop.advance(200)
    assert by_state(drop.instances()) == {("RECREATING", "STOPPING"): 3}
    drop.advance(100)
    assert by_state(drop.instances()) == {("RECREATING", "TERMINATED"): 3}
    assert {e.error.code for e in drop.errors()} == {"ZONE_RESOURCE_POOL_EXHAUSTED"}


@pytest.mark.skipif(not TRACE.exists(), reason="shared capacity traces are not present")
def test_trace_replay_drives_capacity(make_cloud):
    trace = json.loads(TRACE.read_text())
    gap, data = trace["metadata"]["gap_seconds"], trace["data"]
    start = next(i for i in range(len(data) - 1) if data[i] == 0 and any(data[i + 1:]))
    later = next(i for i in range(start, len(data)) if data[i] > 0)
    scenario = {
        "migs": [{"name": "zen-8xa100-us-west1", "region": "us-west1", "zones": ["us-west1-b"],
                  "machine_type": "a2-highgpu-8g"}],
        "capacity": {"default": 0, "traces": [{"file": str(TRACE), "machine_type": "a2-highgpu-8g",
                                               "offset_s": start * gap}]},
    }
    cloud = make_cloud(scenario)
    kw = {"mig": "zen-8xa100-us-west1", "region": "us-west1"}
    cloud.resize(data[later] + 1, **kw)
    assert {i.current_action for i in cloud.instances(**kw)} == {"CREATING"}
    assert all(not i.instance_status for i in cloud.instances(**kw))
    cloud.advance((later - start) * gap + 30)  # the first retry after the trace shows capacity
    placed = [i for i in cloud.instances(**kw) if i.instance_status]
    assert len(placed) == data[later]  # exactly the trace's capacity at that tick
    assert all("/zones/us-west1-b/" in i.instance for i in placed)
    assert cloud.errors(**kw)[-1].error.code == "ZONE_RESOURCE_POOL_EXHAUSTED"


def test_command_line_serves_until_sigterm(tmp_path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(BASE))
    proc = subprocess.Popen(
        [sys.executable, "-m", "zen_dev.local.compute", "--port", "0", "--scenario", str(scenario),
         "--log-dir", str(tmp_path / "logs"), "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )
    try:
        line = proc.stdout.readline()
        match = re.fullmatch(r"compute stand-in listening on (127\.0\.0\.1:\d+)\n", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        migs, _ = compute_clients(match.group(1))
        assert migs.get(project=PROJECT, region=REGION, instance_group_manager=MIG).name == MIG
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


def test_simulate_maintenance_event_preempts_that_vm(make_cloud, tmp_path):
    cloud = make_cloud()
    cloud.resize(2)
    cloud.advance(BOOT_S + 1)
    first, second = cloud.instances()
    cloud.maintenance(first)
    by_name = {i.name: i for i in cloud.instances()}
    assert by_name[first.name].current_action == "RECREATING"
    assert by_name[second.name].current_action == "NONE"
    with pytest.raises(gexc.NotFound):
        cloud.maintenance_event("nope", first.instance.split("/zones/")[1].split("/")[0])
