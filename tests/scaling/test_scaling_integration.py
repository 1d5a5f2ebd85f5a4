"""Scaling end to end against the Compute stand-in (official client) and a real Postgres: a tick with
the preferred region stocked out brings jobs up in the next region; idle VMs go; a VM being scaled
down never wins a claim."""

from __future__ import annotations

import json
import time
from collections import Counter

from datetime import timedelta

import pytest

from tests.messages import heartbeat, job_request
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.app import Zen
from zen.scaling.manager import ClusterOrchestrator
from zen.scaling.planner import ZenPlanner
from zen.store import repository
from zen_dev.local.compute import ComputeStandIn, ManualClock as CloudClock

CLUSTER = "4xa100-40gb"  # regions: us-central1, us-west1, europe-west4
BOOT_S = 60


def build_stack(config, db, publisher, clock, monkeypatch, tmp_path, **extra):
    """Zen wired to a Compute stand-in whose us-central1 has no GPUs; both clocks move together.
    ``extra``: more of the scenario (e.g. ``faults``, ``api``). Returns (zen, advance, instances,
    the stand-in), ``instances(region, cluster=CLUSTER)`` listing a MIG's instances."""
    scenario = {
        "project": config.project, "seed": 2,
        "capacity": {"default": 4, "schedule": [
            {"at_s": 0, "zone": f"us-central1-{z}", "capacity": 0} for z in "abc"]},
        "timings": {"boot": {"dist": "fixed", "s": BOOT_S}, "retry_interval_s": 30, "delete_s": 0},
        **extra,
    }
    cloud_clock = CloudClock()
    standin = ComputeStandIn(scenario, clock=cloud_clock, config=config, log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
    clients = compute_clients_from_env()
    scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients))
    zen = Zen(config, db, publisher, clock, scaler=scaler)

    def advance(seconds):
        clock.advance(seconds)
        standin.advance(seconds)

    def instances(region, cluster=CLUSTER):
        return MigManager(config.project, region, config.cluster(cluster).mig_name(region), *clients).instances()

    return zen, advance, instances, standin


@pytest.fixture
def stack(config, db, publisher, clock, monkeypatch, tmp_path):
    """Zen wired to a Compute stand-in whose us-central1 has no GPUs; both clocks move together."""
    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    yield zen, advance, instances
    standin.stop()


def vm_beat(name, region, state, seq, sent_at="2026-01-01T00:00:00Z", jobs=None):
    """A VM heartbeat; ``jobs``: the attempts it holds, listed (even none) by an agent that may run several."""
    return {"kind": "vm", "vm": name, "cluster": CLUSTER, "region": region, "zone": f"{region}-a",
            "state": state, "seq": seq, "sent_at": sent_at, **({"jobs": jobs} if jobs is not None else {})}


def test_stockout_in_the_preferred_region_brings_jobs_up_in_the_next(stack, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a"))
    # Right after the submission: asked in the preferred region, which has no capacity, and hedged
    # in the next one (no region has delivered yet).
    [stuck] = instances("us-central1")
    assert stuck.current_action == "CREATING" and len(instances("us-west1")) == 1
    fn.submit(job_request("b"))
    # The pass after the second submission reads the stockout error: the region is blocked and
    # both jobs' demand moves to the next region; the stuck instance stays as a free probe.
    assert len(instances("us-west1")) == 2
    assert [i.name for i in instances("us-central1")] == [stuck.name]

    advance(60)
    fn.tick()  # nothing new: the probe is still stuck, the west VMs are booting
    assert len(instances("us-west1")) == 2 and len(instances("us-central1")) == 1
    with zen.db.transaction() as session:
        actions = [r["action"] for r in session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)]
    assert {"BLOCK", "ADD"} <= set(actions)

    advance(BOOT_S + 1)
    west = instances("us-west1")
    assert all(i.running for i in west)
    for seq, vm in enumerate(west, start=1):  # the agents come up and say so
        fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", seq, sent_at=clock().isoformat()))
    fn.tick()
    assert len(instances("us-west1")) == 2  # no more VMs asked: the idle ones cover the queue
    assert instances("europe-west4") == []  # the second job's hedge lost the race: cancelled

    # The agents run the jobs, then sit idle past the idle timeout: they are deleted.
    for job_id, vm in zip("ab", west):
        fn.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
        fn.heartbeat(heartbeat(job_id, "SUCCEEDED", 2, vm=vm.name, region="us-west1", zone=vm.zone, exit_code=0))
        fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 100))
    advance(zen.config.deadlines.idle_timeout_s + 1)
    fn.tick()
    assert instances("us-west1") == []
    assert [j.status.value for j in _jobs(zen)] == ["SUCCEEDED", "SUCCEEDED"]
    # The fleet's bill: the us-central1 probe, listed CREATING with no VM all along, costs nothing (it was
    # billed 422 s); the west VMs count from the pass that listed them RUNNING, not from their first sight.
    from zen.store import usage

    with zen.db.transaction() as session:
        fleet = usage.run(session, "fleet_by_region", since=clock() - timedelta(days=1), now=clock())
    billed = {(row["region"], row["name"]): round(float(row["vm_seconds"])) for row in fleet}
    assert "us-central1" not in {region for region, _ in billed}, billed
    running_from_60_s = (BOOT_S + 1) + (zen.config.deadlines.idle_timeout_s + 1)  # seen at 0, RUNNING at 60
    assert sorted(s for (region, _), s in billed.items() if region == "us-west1") == [running_from_60_s] * 2, billed


def idle_after_a_job(fn, stack, clock, job_id: str = "a", region: str = "us-west1", jobs=None, **request):
    """A VM of ``region`` booted for ``job_id``, which ran there to its end: the VM is idle again (its agent said so;
    ``jobs=[]``: an agent that may run several)."""
    _, advance, instances = stack
    fn.submit(job_request(job_id, **{"regions": [region], **request}))
    advance(BOOT_S + 1)
    [vm] = instances(region)
    fn.heartbeat(vm_beat(vm.name, region, "IDLE", 1, sent_at=clock().isoformat(), jobs=jobs))
    fn.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm.name, region=region, zone=vm.zone))
    fn.heartbeat(heartbeat(job_id, "SUCCEEDED", 2, vm=vm.name, region=region, zone=vm.zone, exit_code=0))
    fn.heartbeat(vm_beat(vm.name, region, "IDLE", 2, sent_at=clock().isoformat(), jobs=jobs))
    return vm


def vm_claiming(fn, stack, job_id: str = "a", region: str = "us-west1"):
    """Submit ``job_id`` to ``region``, boot its VM, and have the VM's agent come up and claim it."""
    _, advance, instances = stack
    fn.submit(job_request(job_id, regions=[region]))
    advance(BOOT_S + 1)
    [vm] = instances(region)
    fn.heartbeat(vm_beat(vm.name, region, "IDLE", 1))
    fn.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm.name, region=region, zone=vm.zone))
    return vm


def test_busy_vm_is_never_scaled_down(stack, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = vm_claiming(fn, stack)
    fn.heartbeat(heartbeat("a", "RUNNING", 2, vm=vm.name, region="us-west1"))
    advance(10_000)  # far past every idle timeout; the job keeps heartbeating
    fn.heartbeat(heartbeat("a", "RUNNING", 3, vm=vm.name, region="us-west1"))
    fn.tick()
    assert [i.name for i in instances("us-west1")] == [vm.name]


def test_a_vm_being_scaled_down_cannot_win_a_claim(stack, publisher):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    manager = zen.scaler.manager(CLUSTER)
    fn.submit(job_request("a", regions=["us-west1"]))
    assert manager._drain("vm-going", "us-west1")  # the scale-down got there first
    fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm="vm-going", region="us-west1"))
    [job] = _jobs(zen)
    assert job.status.value == "QUEUED"
    release = [json.loads(m.data) for m in publisher.on("zen-vm-control")]
    assert [(c["vm"], c["action"]) for c in release] == [("vm-going", "RELEASE")]
    assert len(publisher.on("zen-job-start")) == 2  # a fresh start message for someone else
    # And the other way round: a VM holding a job is not drained.
    fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm="vm-busy", region="us-west1"))
    assert not manager._drain("vm-busy", "us-west1")


def _jobs(zen):
    with zen.db.transaction() as session:
        return repository.list_jobs(session)


def test_zen_explain_lists_the_decisions_with_reasons(stack, db_url, monkeypatch, capsys):
    from zen.cli.main import main
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a"))
    fn.submit(job_request("b"))
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    capsys.readouterr()
    assert main(["explain", CLUSTER, "--json"]) == 0
    decisions = json.loads(capsys.readouterr().out)["decisions"]
    pairs = [(d["action"], d["region"]) for d in decisions]
    assert pairs[:2] == [("ADD", "us-central1"), ("ADD", "us-west1")]  # the first job's ask and its hedge
    assert "hedge" in decisions[1]["reason"]
    block = pairs.index(("BLOCK", "us-central1"))
    assert "stockout" in decisions[block]["reason"] and ("ADD", "us-west1") in pairs[block:]


class CountingPlanner:
    """The real planner, counting its passes per cluster."""

    name = "zen"

    def __init__(self):
        self.inner, self.passes = ZenPlanner(), Counter()

    def plan(self, snapshot):
        self.passes[snapshot.cluster.name] += 1
        return self.inner.plan(snapshot)


def test_a_tick_makes_one_pass_per_cluster_and_never_waits_the_next_pass_spills(stack, config, db, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    # The job arrives while the submission path does not scale (e.g. its pass was skipped).
    scaler, zen.scaler = zen.scaler, None
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a"))
    planner = CountingPlanner()
    zen.scaler = ClusterOrchestrator(config, db, clock, scaler._mig_factory, policy=planner)
    started = time.monotonic()
    fn.tick()
    assert time.monotonic() - started < 10  # no follow-up wait inside the tick
    assert planner.passes[CLUSTER] == 1
    assert len(instances("us-central1")) == 1
    advance(BOOT_S)  # the stockout is in listErrors by now
    fn.tick()
    assert planner.passes[CLUSTER] == 2
    assert len(instances("us-west1")) >= 1  # the next pass moved the job on


def test_a_submission_already_provided_for_runs_no_pass(config, db, publisher, clock, monkeypatch, tmp_path):
    """At its VM limit, a cluster gains nothing from a pass per submission: the first submission's
    pass sees the limit, later ones skip the pass (no Compute call) until the tick."""
    from zen_dev.local.invoke import FunctionsInvoker

    clusters = [c.model_copy(update={"max_vms": 1}) if c.name == CLUSTER else c for c in config.clusters]
    config = config.model_copy(update={"clusters": clusters})
    scenario = {"project": config.project, "seed": 3, "capacity": {"default": 4},
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0}}
    standin = ComputeStandIn(scenario, clock=CloudClock(), config=config, log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
    clients = compute_clients_from_env()
    migs = []

    def mig_factory(project, region, name, model):
        migs.append(MigManager(project, region, name, *clients))
        return migs[-1]

    zen = Zen(config, db, publisher, clock, scaler=ClusterOrchestrator(config, db, clock, mig_factory))
    fn = FunctionsInvoker(zen)
    try:
        fn.submit(job_request("first"))
        calls = sum(m.api_calls for m in migs)
        assert calls > 0  # the first submission's pass asked for the one VM the cluster may have
        for n in range(4):
            fn.submit(job_request(f"more-{n}"))
        assert sum(m.api_calls for m in migs) == calls
        clock.advance(11)  # the pass's view is trusted for 10 s
        fn.submit(job_request("later"))
        assert sum(m.api_calls for m in migs) > calls
    finally:
        standin.stop()
