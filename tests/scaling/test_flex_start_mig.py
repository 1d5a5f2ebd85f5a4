"""Pools of several provisioning models against the Compute stand-in, through the official clients:
flex-start MIGs grown by resize requests (FlexStartMig), one per gang asked for, spot VMs preempted and
standard ones not."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from tests.scaling.fakes import FakeFleet
from tests.scaling.test_manager_apply import Fixed
from zen.adapters.compute import MigApiError, MigManager, compute_clients_from_env
from zen.adapters.flex_start import FORGET_PER_READ, FlexStartMig, pending_name, request_of, resize_requests_client_from_env
from zen.core.config import ZenConfig, load_config
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, Decision, DemandGroup, ErrorKind, Plan, Timing, VmPhase
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigState
from zen.scaling.pricing import cluster_pools
from zen.scaling.vms import classify
from zen_dev.local.compute import ComputeStandIn, ManualClock
from zen_dev.local.compute.resources import ApiError

PROJECT, REGION = "test-proj", "us-central1"
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
ZONES = [f"{REGION}-a", f"{REGION}-b", f"{REGION}-c"]
CLUSTER = {"name": "4xa100", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4, "machine_type": "a2-highgpu-4g",
           "regions": [REGION], "max_vms_per_region": 8, "max_vms": 8,
           "provisioning": ["spot", "standard", "flex-start"]}


def config() -> ZenConfig:
    return ZenConfig.model_validate({**load_config().model_dump(), "project": PROJECT, "clusters": [CLUSTER],
                                     "queues": []})


def scenario(capacity: int, zones: list[str] = ZONES, schedule: list[dict] | None = None) -> dict:
    """``capacity`` VMs in each of ``zones``, none in the region's others; or the capacity steps ``schedule``."""
    return {"project": PROJECT, "seed": 1,
            "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0},
            "capacity": {"schedule": schedule or [{"at_s": 0, "zone": z, "capacity": capacity if z in zones else 0}
                                                  for z in ZONES]}}


@pytest.fixture
def cloud(monkeypatch, tmp_path):
    started = []

    def make(capacity: int = 10, zones: list[str] = ZONES, schedule: list[dict] | None = None):
        standin = ComputeStandIn(scenario(capacity, zones, schedule), config=config(), clock=ManualClock(),
                                 log_dir=tmp_path).start()
        started.append(standin)
        monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
        cluster = config().clusters[0]
        flex = FlexStartMig(PROJECT, REGION, cluster.mig_name(REGION, "flex-start"), *compute_clients_from_env(),
                            resize_requests_client_from_env(), run_s=cluster.flex_start_run_s,
                            now=lambda: datetime.fromisoformat(standin.world.ts.at(standin.world.now)))
        return standin, flex, cluster

    yield make
    for standin in started:
        standin.stop()


def flex_manager(cluster, flex, jobs: int, now: list[datetime]):
    """A manager of ``cluster``'s flex-start pool alone, ``jobs`` one-node jobs queued there (``CarriedFleet``), its
    clock ``now[0]``: (the manager, the pool, the fleet)."""
    pools = cluster_pools(cluster)
    [pool] = [p for p in pools if p.endswith("flex-start")]
    fleet = CarriedFleet((DemandGroup((pool,), jobs, NOW),))
    return ClusterManager(cluster, fleet, {pool: flex}, lambda: now[0], Timing(), ZenPlanner(), telemetry=False,
                          pools={pool: pools[pool]}, concurrent=False), pool, fleet


def test_the_standin_makes_one_mig_per_pool_with_its_model_in_the_template(cloud):
    standin, _, cluster = cloud()
    assert {m.name for m in standin.migs} == {"zen-4xa100-us-central1", "zen-4xa100-us-central1-std",
                                              "zen-4xa100-us-central1-flex"}
    templates = compute_v1.InstanceTemplatesClient(transport=compute_v1.services.instance_templates.transports.rest
                                                   .InstanceTemplatesRestTransport(
                                                       host=standin.endpoint.removeprefix("http://"),
                                                       credentials=_anonymous(), url_scheme="http"))
    models = {m: templates.get(project=PROJECT, instance_template=f"{cluster.mig_name(REGION, m)}-template")
              .properties.scheduling for m in cluster.provisioning}
    assert models["spot"].provisioning_model == "SPOT" and models["spot"].instance_termination_action == "DELETE"
    assert models["standard"].provisioning_model == "STANDARD"
    assert models["flex-start"].provisioning_model == "FLEX_START"


def test_a_resize_request_is_pending_as_booting_vms_then_granted_all_at_once(cloud):
    standin, flex, _ = cloud(capacity=2)  # 3 zones of 2: room for the request's 2 VMs in one zone
    flex.resize(2, together=(2,))  # a gang of 2: one request
    state = flex.read()
    assert state.target_size == 2 and len(state.instances) == 2
    assert all(request_of(i.name) and i.current_action == "CREATING" and i.status == "" for i in state.instances)
    [request] = {request_of(i.name) for i in state.instances}
    assert {i.name for i in state.instances} == {pending_name(flex.name, request, n) for n in (0, 1)}
    vm = classify(state.instances[0], REGION, standin.world.ts.start, {}, {})  # type: ignore[arg-type]
    assert vm.phase is VmPhase.BOOTING and not vm.started
    flex.resize(2, together=(2,))  # as many as there are and are asked for: no second request
    assert list(flex.pending()) == [request]
    standin.advance(31)  # granted after its delay: both VMs at once, the MIG's target grown by 2
    state = flex.read()
    assert flex.pending() == {} and state.target_size == 2
    assert len(state.instances) == 2 and all(request_of(i.name) is None for i in state.instances)
    standin.advance(61)
    assert all(i.running for i in flex.read().instances)


def test_each_one_node_jobs_vm_is_a_request_of_its_own(cloud):
    """Three one-node jobs' VMs where each zone holds two: asked in one request, none was granted (no zone held
    all three) while two could have run; each is a request of its own, and two are granted."""
    standin, flex, _ = cloud(capacity=2)
    flex.resize(3)
    assert sorted(flex.pending().values()) == [1, 1, 1]
    standin.advance(31)
    assert len([i for i in flex.read().instances if request_of(i.name) is None]) >= 2


def test_a_queued_request_is_counted_while_a_granted_ones_vms_are_created(cloud):
    """A granted request's VMs are listed CREATING with no status until they exist, as a queued request's would
    be if Compute listed them: while r1's two are created, r2 (two more, queued) still counts, so no pass asks
    beyond the cluster's limits (it took r1's two for r2's and asked for r2's again)."""
    standin, flex, _ = cloud(capacity=2)
    standin.world.resize_requests.create_delay_s = 20.0
    flex.resize(2)
    standin.advance(31)  # r1 granted: its VMs being created
    flex.resize(4)  # r2 queued (granted 30 s after it at the soonest)
    state = flex.read()
    assert [i.current_action == "CREATING" and i.status == "" for i in state.instances] == [True] * 4
    assert state.target_size == 4 and len([i for i in state.instances if request_of(i.name)]) == 2
    flex.resize(4)
    assert sum(flex.pending().values()) == 2  # nothing more asked
    standin.advance(30)
    state = flex.read()
    assert state.target_size == 4 and sum(1 for i in state.instances if i.status) == 2


def test_a_request_waits_until_one_zone_holds_all_of_its_vms(cloud):
    standin, flex, _ = cloud(capacity=1)
    flex.resize(2, together=(2,))  # 2 VMs, room for 3 in the region but 1 per zone: never granted in part or over zones
    standin.advance(600)
    assert sum(flex.pending().values()) == 2 and flex.read().target_size == 2
    assert not [i for i in flex.read().instances if request_of(i.name) is None]
    standin, flex, _ = cloud(capacity=3)
    flex.resize(3, together=(3,))  # one zone holds all three: granted there
    standin.advance(31)
    zones = {i.zone for i in flex.read().instances if request_of(i.name) is None}
    assert flex.pending() == {} and len(zones) == 1, zones
    standin, flex, _ = cloud(capacity=1)
    flex.resize(4, together=(4,))  # 4 VMs, room for 3: never granted in part
    standin.advance(600)
    assert sum(flex.pending().values()) == 4 and flex.read().target_size == 4
    assert not [i for i in flex.read().instances if request_of(i.name) is None]


def test_deleting_a_pending_vm_cancels_its_request(cloud):
    standin, flex, _ = cloud()
    flex.resize(3, together=(3,))
    names = [i.name for i in flex.read().instances]
    [request] = requests_of(standin, flex)
    flex.delete_instances(names[:1], {})
    assert request.state == "CANCELLED"
    assert flex.pending() == {} and flex.read().instances == [] and flex.target_size() == 0
    assert requests_of(standin, flex) == []  # ended without a VM: deleted by the read that saw it so
    standin.advance(60)  # a cancelled request is never granted
    assert flex.read().target_size == 0


def requests_of(standin, flex):
    return standin.world.resize_requests.of(next(m for m in standin.world.migs.values() if m.name == flex.name))


def test_a_granted_request_is_deleted_once_its_run_duration_is_over_and_a_few_ended_ones_each_read(cloud):
    """Compute keeps an ended request until it is deleted, and each pass lists them all."""
    standin, flex, cluster = cloud()
    flex.resize(1)
    standin.advance(31)
    [vm] = flex.read().instances
    assert vm.status and [r.state for r in requests_of(standin, flex)] == ["SUCCEEDED"]
    standin.advance(cluster.flex_start_run_s - 60)
    assert [i.name for i in flex.read().instances] == [vm.name]
    assert [r.state for r in requests_of(standin, flex)] == ["SUCCEEDED"]  # its VM may still run: kept
    standin.advance(120)
    flex.read()
    assert requests_of(standin, flex) == []
    for _ in range(FORGET_PER_READ + 2):  # more ended than a read deletes
        flex.resize(1)
        flex.delete_instances([i.name for i in flex.read().instances], {})
    ended = len(requests_of(standin, flex))
    flex.read()
    assert len(requests_of(standin, flex)) == max(0, ended - FORGET_PER_READ)


def test_a_granted_request_cannot_be_cancelled_and_its_vms_are_deleted_as_any(cloud):
    standin, flex, _ = cloud()
    flex.resize(1)
    pending = flex.read().instances[0].name
    standin.advance(31)
    flex.delete_instances([pending], {})  # granted meanwhile: Compute refuses the cancel, nothing to do
    [vm] = flex.read().instances
    standin.advance(61)
    flex.delete_instances([vm.name], {vm.name: flex.read().instances[0].zone})
    assert flex.read().target_size == 0


def test_a_request_granted_since_the_read_stops_none_of_the_other_cancels(cloud):
    """Two unwanted requests; the first is granted between the read and the cancels. Compute refused its
    cancel and the loop raised there: the second, still queued, was left for a grant nobody wanted."""
    standin, flex, _ = cloud(capacity=2)
    flex.resize(1)  # fits a zone of 2: granted at the next step
    flex.resize(4, together=(3,))  # a gang's 3 VMs, in no zone: queued
    sizes = {r.name: r.resize_by for r in requests_of(standin, flex)}
    names = sorted((i.name for i in flex.read().instances), key=lambda n: sizes[request_of(n)])  # the granted first
    standin.advance(31)
    flex.delete_instances(names, {})
    assert sorted((r.resize_by, r.state) for r in requests_of(standin, flex)) == [(1, "SUCCEEDED"), (3, "CANCELLED")]


@pytest.mark.parametrize("nodes", [1, 2], ids=["one-node", "gang"])
def test_a_late_job_whose_other_pool_is_out_keeps_its_one_request(cloud, nodes):
    """A job accepting spot and flex-start, spot stocked out and nothing granted. Past its start bound its queued
    request no longer covered it (it may take another pool), yet flex-start was the one pool left to ask in: a
    new request every pass, all kept queued (9 for the one job in 25 minutes), each a VM a grant would bill. A
    gang alike (three requests of 2 in 25 passes: ``gangs.ask`` takes its own queued request now)."""
    standin, flex, cluster = cloud(capacity=0)
    pools = cluster_pools(cluster)
    spot, flex_pool = (next(p for p in pools if pools[p].model == m) for m in ("spot", "flex-start"))
    spot_mig = MigManager(PROJECT, REGION, cluster.mig_name(REGION, "spot"), *compute_clients_from_env())
    now = [NOW]
    fleet = CarriedFleet((DemandGroup((spot, flex_pool), nodes, NOW, gang=nodes),))
    manager = ClusterManager(cluster, fleet, {spot: spot_mig, flex_pool: flex}, lambda: now[0], Timing(), ZenPlanner(),
                             telemetry=False, pools={p: pools[p] for p in (spot, flex_pool)}, concurrent=False)
    made: set[str] = set()
    for _ in range(25):
        manager.run()
        made |= {r.name for r in requests_of(standin, flex)}
        now[0] += timedelta(minutes=1)
        standin.advance(60)
    assert Timing().max_start_wait_s < 25 * 60
    queued = [r.resize_by for r in requests_of(standin, flex) if r.state == "ACCEPTED"]
    assert len(made) <= 2 and sum(queued) <= nodes, (len(made), queued)


def test_each_gang_gets_a_resize_request_of_its_own_and_the_rest_one_together(cloud):
    standin, flex, _ = cloud()
    flex.resize(5, together=(2, 2))  # two gangs of 2 and one VM for a one-node job
    assert sorted(flex.pending().values()) == [1, 2, 2] and flex.target_size() == 5
    standin, flex, _ = cloud()
    flex.resize(3, together=(2, 2))  # room for one whole gang: it and the VM over
    assert sorted(flex.pending().values()) == [1, 2]


def test_two_gangs_planned_in_one_pass_are_two_resize_requests(cloud):
    standin, flex, cluster = cloud()
    pools = cluster_pools(cluster)
    [pool] = [key for key, p in pools.items() if p.model == "flex-start"]
    migs = {key: flex if key == pool else MigManager(PROJECT, REGION, cluster.mig_name(REGION, p.model),
                                                     *compute_clients_from_env())
            for key, p in pools.items()}
    fleet = FakeFleet(FleetFacts((DemandGroup((pool,), 4, NOW, gang=2),), {}, {}, {}, 0), NOW)
    report = ClusterManager(cluster, fleet, migs, lambda: NOW, Timing(), concurrent=False).run()
    assert report.added == {pool: 4}
    assert sorted(flex.pending().values()) == [2, 2]  # not one request of 4: each gang granted on its own


def test_the_resize_request_api_answers_as_compute_does(cloud):
    standin, flex, _ = cloud()
    client = resize_requests_client_from_env()
    op = client.insert_unary(project=PROJECT, region=REGION, instance_group_manager=flex.name,
                             instance_group_manager_resize_request_resource=compute_v1.InstanceGroupManagerResizeRequest(
                                 name="by-hand", resize_by=2, requested_run_duration=compute_v1.Duration(seconds=3600)))
    assert op.operation_type == "compute.regionInstanceGroupManagerResizeRequests.insert"
    got = client.get(project=PROJECT, region=REGION, instance_group_manager=flex.name, resize_request="by-hand")
    assert (got.state, got.resize_by, got.requested_run_duration.seconds) == ("ACCEPTED", 2, 3600)
    with pytest.raises(gexc.BadRequest):  # still active
        client.delete_unary(project=PROJECT, region=REGION, instance_group_manager=flex.name, resize_request="by-hand")
    with pytest.raises(gexc.BadRequest):
        client.insert_unary(project=PROJECT, region=REGION, instance_group_manager=flex.name,
                            instance_group_manager_resize_request_resource=compute_v1.InstanceGroupManagerResizeRequest(
                                name="Not_RFC1035", resize_by=1))
    standin.advance(31)
    assert [r.state for r in client.list(project=PROJECT, region=REGION, instance_group_manager=flex.name)] \
        == ["SUCCEEDED"]
    standin.advance(3600 + 61)  # its run duration over: its VMs are deleted
    client.delete_unary(project=PROJECT, region=REGION, instance_group_manager=flex.name, resize_request="by-hand")
    assert list(client.list(project=PROJECT, region=REGION, instance_group_manager=flex.name)) == []
    assert flex.read().target_size == 0


def test_spot_vms_are_preempted_when_capacity_falls_and_standard_ones_are_not(cloud, monkeypatch):
    standin, _, cluster = cloud()
    spot = MigManager(PROJECT, REGION, cluster.mig_name(REGION, "spot"), *compute_clients_from_env())
    standard = MigManager(PROJECT, REGION, cluster.mig_name(REGION, "standard"), *compute_clients_from_env())
    spot.resize(1)
    standard.resize(1)
    standin.advance(61)
    world = standin.world
    with world.lock:
        for mig in world.migs.values():
            for inst in list(mig.instances.values()):
                world.preempt(inst, "preempted (test)")
    standin.advance(1)
    assert [i.current_action for i in spot.instances()] != ["NONE"]  # stopping, to be recreated or deleted
    assert [i.running for i in standard.instances()] == [True]


class CarriedFleet(FakeFleet):
    """The queued demand as a test sets it (``demand``); the planner's memory carried from pass to pass."""

    def __init__(self, demand):
        super().__init__(FleetFacts(demand, {}, {}, {}, 0), NOW)
        self.demand = demand

    def facts(self, cluster, arrivals_since):
        return FleetFacts(self.demand, {}, {}, self.recorded[-1][0] if self.recorded else {}, 0)


def test_a_failed_resize_request_strikes_its_pool_once_and_is_not_asked_again_each_pass(cloud):
    """Compute gives a request up for good (FAILED, its reason in ``status.error``). It was dropped from the pending
    ones and deleted without a word: the pool never struck, a new request inserted every pass (30 in 30 minutes,
    329 Compute calls) and the job waiting with no reason given. The read that deletes it reports it once."""
    standin, flex, cluster = cloud(capacity=0)  # nothing is granted
    now = [NOW]
    manager, pool, fleet = flex_manager(cluster, flex, 1, now)
    made: set[str] = set()
    for _ in range(30):
        manager.run()
        with standin.world.lock:  # Compute fails each queued request
            for request in requests_of(standin, flex):
                made.add(request.name)
                standin.world.resize_requests.fail(request, "ZONE_RESOURCE_POOL_EXHAUSTED", "no A100s in the region")
        now[0] += timedelta(minutes=1)
        standin.advance(60)
    blocks = [d.reason for _, decisions in fleet.recorded for d in decisions if d.action is Action.BLOCK]
    assert len(made) <= 4, (len(made), flex.api_calls)  # one, then one a block (3, 6, 12 minutes)
    assert blocks and "failed (ZONE_RESOURCE_POOL_EXHAUSTED: no A100s in the region)" in blocks[0], blocks
    assert requests_of(standin, flex) == [] or all(r.state == "ACCEPTED" for r in requests_of(standin, flex))


def test_a_failed_request_is_left_for_the_read_that_reports_it(cloud):
    """A target size read (before a resize) deletes no FAILED request: its error would be lost with it."""
    standin, flex, _ = cloud(capacity=0)
    flex.resize(1)
    with standin.world.lock:
        [request] = requests_of(standin, flex)
        standin.world.resize_requests.fail(request, "QUOTA_EXCEEDED", "")
    assert flex.target_size() == 0 and [r.state for r in requests_of(standin, flex)] == ["FAILED"]
    [error] = flex.read().errors
    assert error.kind is ErrorKind.QUOTA and error.detail == f"flex-start resize request {request.name} failed (QUOTA_EXCEEDED)"
    assert requests_of(standin, flex) == [] and flex.read().errors == []


def _anonymous():
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()


def test_an_empty_flex_start_mig_with_no_request_is_read_in_one_call(cloud):
    """The tick's region listing says the MIG is empty and stable: its requests are listed (one may be queued), and
    with none at all nothing else is read. It was three calls a flex-start pool a tick, with nothing there."""
    from zen.scaling.port import MigSummary

    standin, flex, _ = cloud(capacity=0)
    before = flex.api_calls
    assert flex.read(summary=MigSummary(0, True)) == MigState(0, [], [])
    assert flex.api_calls - before == 1
    flex.resize(1)  # queued: the MIG's target size is still 0
    before = flex.api_calls
    state = flex.read(summary=MigSummary(0, True))
    assert [request_of(i.name) for i in state.instances] == [r.name for r in requests_of(standin, flex)]
    assert flex.api_calls - before == 3


def test_a_vm_deleted_beside_a_cancel_that_failed_is_reported_deleted(cloud):
    """A pass deletes an idle flex-start VM and cancels a queued request of its pool in one
    ``FlexStartMig.delete_instances``; the VM's delete goes through, the cancel is refused (a 403 rate limit). The
    whole call raised, so the VM Compute was deleting was recorded as a HOLD "not deleted: ... the delete failed"
    and left out of ``report.deleted``. The error names what it left (``MigApiError.undeleted``)."""
    standin, flex, cluster = cloud(capacity=1, zones=ZONES[:1])  # the first request granted, the second waits
    handle = standin.api.handle

    def limited(method, path, query, body):  # Compute's 403 rateLimitExceeded, on the cancels alone
        if method == "POST" and path.endswith("/cancel"):
            return 403, ApiError(403, "rateLimitExceeded", "Rate Limit Exceeded").body()
        return handle(method, path, query, body)

    standin.api.handle = limited
    flex.resize(1)
    standin.advance(120)  # granted and RUNNING
    flex.resize(2)  # a second request: queued (no room)
    instances = flex.read().instances
    [real] = [i.name for i in instances if request_of(i.name) is None]
    [pending] = [i.name for i in instances if request_of(i.name) is not None]
    [pool] = [p for p in cluster_pools(cluster) if p.endswith("flex-start")]
    fleet = FakeFleet(FleetFacts((), {}, {real: {"state": "IDLE", "idle_since": NOW, "last_seen_at": NOW}}, {}, 0), NOW)
    plan = Plan(delete=[(pool, real), (pool, pending)],
                decisions=[Decision(Action.DELETE, pool, "idle and not needed", vm=real),
                           Decision(Action.DELETE, pool, "no queued job wants its flex-start pool", vm=pending)])
    manager = ClusterManager(cluster, fleet, {pool: flex}, lambda: NOW, Timing(), Fixed(plan), telemetry=False,
                             concurrent=False, pools={pool: cluster_pools(cluster)[pool]})
    report = manager.run()
    assert real not in [i.name for i in flex.read().instances if not i.deleting]  # Compute deleted it
    said = [(d.action.value, d.reason) for d in report.decisions if d.vm == real]
    assert said == [("DELETE", "idle and not needed")], said  # not "not deleted: ... the delete failed"
    assert real in report.deleted and pending not in report.deleted


def test_vms_deleted_by_a_migs_first_delete_call_are_not_named_undeleted():
    """``MigManager.delete_instances`` deletes in two calls (the instances with a zone, then those the listing gave
    none): when the second was refused, the error named nothing, and the VMs Compute was deleting were reported
    "not deleted: ... the delete failed"; a refused first call skipped the second."""
    calls: list[list[str]] = []

    class TwoCalls(MigManager):  # the zoned call goes through; the zoneless one is refused
        def _write(self, method, **fields):
            calls.append(list(fields["region_instance_group_managers_delete_instances_request_resource"].instances))
            if len(calls) == 2:
                raise MigApiError("deleteInstances refused") from gexc.BadRequest("no such instance")

    migs = type("Migs", (), {"delete_instances_unary": None})()  # never called: _write is replaced
    mig = TwoCalls(PROJECT, REGION, "zen-c-us-central1", migs=migs, operations=None)
    with pytest.raises(MigApiError) as raised:
        mig.delete_instances(["idle-vm", "probe"], {"idle-vm": f"{REGION}-a", "probe": None})
    assert calls == [[f"zones/{REGION}-a/instances/idle-vm"], ["probe"]]
    assert raised.value.undeleted == frozenset({"probe"})
