"""Provisioning models in the simulator: a MIG per pool, spot alone preempted, capacity per model,
flex-start requests granted whole (one per gang asked for), checkpoints,
and the baselines that keep to one model."""

from __future__ import annotations

import re

import pytest

from zen.scaling.model import Plan, VmPhase
from zen_dev.capacity.yamllines import ScenarioError
from zen_dev.sim.flexstart import FlexGrants
from zen_dev.sim.jobs import SimJob
from zen_dev.sim.policies import make_policy
from zen_dev.sim.runner import run_policies
from zen_dev.sim.scenario import parse_scenario
from zen_dev.sim.world import Simulation

PRICES = "prices: {r1: {spot: 2.0, standard: 6.0, flex-start: 3.0}, r2: {spot: 1.0, standard: 5.0, flex-start: 2.5}}\n"


def _scenario(models: str = "[spot, standard]", capacity: str = "{default: 4}", extra: str = "",
              prices: str = PRICES, per_region: int = 4):
    text = (f"clusters: [{{name: c, gpu_count: 1, machine_type: a2-highgpu-1g, regions: [r1, r2], "
            f"max_vms_per_region: {per_region}, max_vms: 16, provisioning: {models}}}]\n"
            f"zones: {{r1: [r1-a], r2: [r2-a]}}\ncapacity: {capacity}\nboot: {{dist: fixed, s: 100}}\n"
            f"delete_s: 0\n{prices}{extra}")
    return parse_scenario(text, source="t.yaml", name="t")


class Scripted:
    """Asks for what ``script`` says at the first pass (pool -> VMs), deletes nothing, records snapshots."""

    name = "scripted"

    def __init__(self, script: dict[str, int], together: dict[str, list[int]] | None = None):
        self.script, self.together, self.snapshots = script, together or {}, []

    def plan(self, snapshot):
        self.snapshots.append(snapshot)
        plan, self.script = Plan(add=dict(self.script), together=self.together), {}
        return plan


def _world(scenario, policy, jobs=(), horizon_s=3000.0):
    return Simulation(scenario, list(jobs), policy, horizon_s=horizon_s)


def test_each_pool_is_a_mig_named_as_production_names_it_and_priced():
    world = _world(_scenario("[spot, standard, flex-start]"), make_policy("zen"))
    migs = world.clusters["c"].migs
    assert list(migs) == ["r1", "r1/standard", "r1/flex-start", "r2", "r2/standard", "r2/flex-start"]
    assert [m.name for m in migs.values()] == ["zen-c-r1", "zen-c-r1-std", "zen-c-r1-flex", "zen-c-r2",
                                               "zen-c-r2-std", "zen-c-r2-flex"]
    assert [m.usd_per_hour for m in migs.values()] == [2.0, 6.0, 3.0, 1.0, 5.0, 2.5]
    assert [m.preemptible for m in migs.values()] == [True, False, False, True, False, False]
    # The baselines keep to one model: ask-every-region the primary, its -standard twin standard.
    assert list(_world(_scenario(), make_policy("ask-every-region")).clusters["c"].migs) == ["r1", "r2"]
    standard = _world(_scenario(), make_policy("ask-every-region-standard")).clusters["c"]
    assert list(standard.migs) == ["r1", "r2"] and {m.model for m in standard.migs.values()} == {"standard"}


def test_a_baseline_on_a_model_the_scenario_does_not_price_is_skipped():
    unpriced_standard = _scenario("[spot]", prices="prices: {r1: {spot: 2.0}, r2: {spot: 1.0}}\n")
    skipped: list[str] = []
    results = run_policies(unpriced_standard, [SimJob("j", "c", 0.0, 60.0, ("r1", "r2"))],
                           ["zen", "ask-every-region-standard"], horizon_s=600, skipped=skipped)
    assert list(results) == ["zen"] and skipped == [
        "policy ask-every-region-standard runs standard VMs, which the scenario does not price for cluster c"]


def test_a_model_a_region_does_not_price_is_not_sold_there_and_every_policy_runs():
    """A harness's price table taken from a catalog lists no spot price where GCE sells no spot VMs of the shape
    (nor flex-start where the region has no Dynamic Workload Scheduler). Such a scenario was refused (exit 2: no
    figures at all); now that pool is not sold: its MIG is there, as production's, with no capacity, so no policy
    gets a VM in it (Scripted asks for one: it waits, failing as in a stockout), and the floor is the cheapest
    listed price."""
    gap = _scenario("[spot, standard, flex-start]", prices="prices: {r1: {spot: 2.0, standard: 6.0, flex-start: 3.0}, "
                                                            "r2: {standard: 5.0}}\n")
    assert gap.clusters[0].floor_usd_per_vm_hour == 2.0
    jobs = [SimJob(f"j{i}", "c", 60.0 * i, 600.0, ("r1", "r2")) for i in range(12)]
    results = run_policies(gap, jobs, ["zen", "cheapest-first", "ask-every-region", "ask-every-region-standard"],
                           horizon_s=6000)
    assert all(r.summary()["never_started"] == 0 and r.usd > 0 for r in results.values())
    world = _world(gap, Scripted({"r2": 1, "r2/flex-start": 1, "r1": 1}), jobs[:1])
    world.run()
    migs = world.clusters["c"].migs
    assert [vm.zone for vm in migs["r2"].vms.values()] == [None] and migs["r2"].errors_until > 0  # waits, refused
    assert [vm.zone for vm in migs["r2/flex-start"].vms.values()] == [None]  # its request never granted
    assert all(vm.zone is not None for vm in migs["r1"].vms.values())
    # A baseline's own model the cluster does not list (ask-every-region-standard's standard VMs) alike.
    spot_only = _scenario("[spot]", prices="prices: {r1: {spot: 2.0, standard: 6.0}, r2: {spot: 1.0}}\n")
    world = _world(spot_only, make_policy("ask-every-region-standard"), jobs[:1])
    world.run()
    assert world.result.starts[0][1] is not None and world.result.vms_created == 1  # in r1: asked in both, placed once
    with pytest.raises(ScenarioError, match=r"prices\.r2: none of the models cluster c's provisioning lists"):
        _scenario("[spot, flex-start]", prices="prices: {r1: {spot: 2.0}, r2: {standard: 5.0}}\n")


def test_a_capacity_drop_takes_back_spot_vms_only():
    # r1-a holds 2 VMs, then none from 500 s: the spot VM's job is queued again, the standard one runs on.
    scenario = _scenario(capacity="{default: 0, schedule: [{at_s: 0, zone: r1-a, capacity: 2}, "
                                  "{at_s: 500, zone: r1-a, capacity: 0}]}")
    world = _world(scenario, Scripted({"r1": 1, "r1/standard": 1}),
                   [SimJob("a", "c", 0.0, 2000.0, ("r1",)), SimJob("b", "c", 0.0, 2000.0, ("r1",))])
    result = world.run()
    assert result.preemptions == 1
    survivors = [vm.mig.key for vm in world.clusters["c"].vms.values() if vm.phase is VmPhase.BUSY]
    assert survivors == ["r1/standard"]


def test_a_model_may_have_its_own_capacity():
    # Spot has room for none in r1-a, standard (the machine type's capacity) for 2.
    scenario = _scenario(capacity="{default: 0, schedule: [{at_s: 0, zone: r1-a, capacity: 2}, "
                                  "{at_s: 0, zone: r1-a, machine_type: a2-highgpu-1g, model: spot, capacity: 0}]}")
    world = _world(scenario, Scripted({"r1": 1, "r1/standard": 1}), horizon_s=300)
    world.run()
    placed = {vm.mig.key: vm.created_s is not None for vm in world.clusters["c"].vms.values()}
    assert placed == {"r1": False, "r1/standard": True}
    with pytest.raises(ScenarioError, match="model: unknown provisioning model 'preemptible'"):
        _scenario(capacity="{default: 1, schedule: [{at_s: 0, zone: r1-a, model: preemptible, capacity: 1}]}")


def test_a_flex_start_request_is_granted_whole_after_its_queue():
    # Room for 2 in r1-a; a request for 3 (a gang's) waits its 300 s queue, then for room (a third slot at 800 s).
    scenario = _scenario("[flex-start]", capacity="{default: 0, schedule: [{at_s: 0, zone: r1-a, capacity: 2}, "
                         "{at_s: 800, zone: r1-a, capacity: 3}]}",
                         extra="flex_start: {grant: {dist: fixed, s: 300}}\n")
    world = _world(scenario, Scripted({"r1": 3}, together={"r1": [3]}), horizon_s=1200)
    world.run()
    vms = list(world.clusters["c"].vms.values())
    assert len(vms) == 3 and {vm.created_s for vm in vms} == {800.0}
    listed = Scripted({"r1": 2})  # before the grant: booting, no capacity, no error (not a stockout)
    _world(_scenario("[flex-start]", extra="flex_start: {grant: {dist: fixed, s: 300}}\n"), listed,
           horizon_s=200).run()
    later = listed.snapshots[-1]
    assert [(vm.phase, vm.started, vm.creation_error) for vm in later.vms] == [(VmPhase.BOOTING, False, None)] * 2
    assert not later.errors


def test_two_gangs_asked_for_in_one_flex_start_pool_get_a_request_each(monkeypatch):
    # Room for 2 in r1-a: one request of 4 would never be granted; one of 2 per gang is, one after the other.
    requests, request = [], FlexGrants.request

    def spied(self, mig, count):
        requests.append((self._world.now, count))
        request(self, mig, count)

    monkeypatch.setattr(FlexGrants, "request", spied)
    scenario = _scenario("[flex-start]", capacity="{default: 0, schedule: [{at_s: 0, zone: r1-a, capacity: 2}]}",
                         extra="flex_start: {grant: {dist: fixed, s: 300}}\n")
    gangs = [SimJob(f"g{i}", "c", 0.0, 600.0, ("r1",), nodes=2) for i in (1, 2)]
    result = _world(scenario, make_policy("zen"), gangs, horizon_s=3000).run()
    assert requests == [(0.0, 2), (0.0, 2)]
    assert result.gang_starts == [(0.0, 400.0), (0.0, 1000.0)]  # granted at 300 s; the second when the first ends


def test_a_checkpointing_job_resumes_from_its_last_checkpoint():
    # A 3000 s job on spot from 100 s; capacity gone at 1500 s: 1400 s run, 1200 s kept (every 600 s),
    # 200 s reworked; it resumes at 2000 s with 1800 s to go and finishes at 3900 s.
    capacity = ("{default: 0, schedule: [{at_s: 0, zone: r1-a, capacity: 1}, {at_s: 1500, zone: r1-a, capacity: 0}, "
                "{at_s: 1900, zone: r1-a, capacity: 1}]}")
    job = SimJob("j", "c", 0.0, 3000.0, ("r1",), checkpoint_every_s=600.0)
    result = Simulation(_scenario("[spot]", capacity=capacity), [job], make_policy("zen"), horizon_s=6000).run()
    assert result.preemptions == 1
    assert result.rework_gpu_seconds == pytest.approx(200)
    assert result.useful_gpu_seconds == pytest.approx(3000)
    plain = Simulation(_scenario("[spot]", capacity=capacity), [SimJob("j", "c", 0.0, 3000.0, ("r1",))],
                       make_policy("zen"), horizon_s=6000).run()
    assert plain.rework_gpu_seconds == pytest.approx(1400)


def test_zen_runs_on_the_cheapest_pool_and_cheapest_first_too():
    jobs = [SimJob(f"j{i}", "c", 10.0 * i, 600.0, ("r1", "r2")) for i in range(3)]
    results = run_policies(_scenario(), jobs, ["zen", "cheapest-first", "ask-every-region-standard"], horizon_s=3000)
    # r2 spot ($1/h) is the cheapest: zen and cheapest-first start every job there; zen pays about the
    # floor (with each 600 s job its boot after RUNNING and its spare boot's billed minute: 1.32x), the
    # original on standard about 5x it.
    assert {region for _, region in results["zen"].start_regions} == {"r2"}
    assert {region for _, region in results["cheapest-first"].start_regions} == {"r2"}
    assert results["zen"].dollars()["usd_vs_floor"] < 1.35
    assert results["ask-every-region-standard"].dollars()["usd_vs_floor"] > 4


def test_deleting_one_waiting_flex_start_vm_cancels_its_whole_request():
    class AskThenDeleteOne(Scripted):
        def plan(self, snapshot):
            if not self.script and snapshot.vms:
                return Plan(delete=[(snapshot.vms[0].region, snapshot.vms[0].name)])
            return super().plan(snapshot)

    scenario = _scenario("[flex-start]", extra="flex_start: {grant: {dist: fixed, s: 300}}\n")
    world = _world(scenario, AskThenDeleteOne({"r1": 3}), [SimJob("j", "c", 100.0, 60.0, ("r1",))], horizon_s=1200)
    world.run()
    assert not world.clusters["c"].vms and world.clusters["c"].migs["r1"].target == 0


def test_a_job_accepting_one_model_runs_only_in_its_pools():
    # r2 spot is the cheapest pool; a job accepting standard only starts on a standard VM, one accepting any on spot.
    jobs = [SimJob("std", "c", 0.0, 600.0, ("r1", "r2"), provisioning="standard"),
            SimJob("any", "c", 0.0, 600.0, ("r1", "r2"))]
    world = _world(_scenario(), make_policy("zen"), jobs)
    assert [job.pools for job in world.jobs] == [("r1/standard", "r2/standard"),
                                                 ("r1", "r1/standard", "r2", "r2/standard")]
    world.run()
    assert all(job.first_start_s is not None for job in world.jobs)
    # A world of one model (a baseline) runs the job on its own model: the original ran every job on standard.
    spot_only = _world(_scenario(), make_policy("ask-every-region"), jobs)
    assert [job.pools for job in spot_only.jobs] == [("r1", "r2"), ("r1", "r2")]
    # A world of several models that lacks the job's is refused: the job could never start.
    with pytest.raises(ValueError, match="accepts provisioning 'flex-start', which cluster c does not list"):
        _world(_scenario(), make_policy("zen"), [SimJob("flex", "c", 0.0, 60.0, ("r1",), provisioning="flex-start")])


def test_the_model_a_job_accepts_is_the_model_it_is_billed_at():
    jobs = [SimJob("std", "c", 0.0, 600.0, ("r2",), provisioning="standard")]
    result = run_policies(_scenario(), jobs, ["zen"], horizon_s=3000)["zen"]
    # r2 standard at $5/h: 600 s of useful run is $0.83, against the floor's $0.17 (r2 spot, $1/h).
    assert result.usd_useful == pytest.approx(5.0 * 600 / 3600)
    assert result.dollars()["usd_vs_floor"] > 4.5


def test_a_synthetic_trace_draws_what_its_jobs_accept_and_refuses_a_model_its_cluster_lacks():
    from zen_dev.sim.jobs import load_jobs
    mixed = _scenario(extra="jobs: {kind: synthetic, count: 400, provisioning: {standard: 1, any: 3}}\n")
    accepts = [job.provisioning for job in load_jobs(mixed)]
    assert set(accepts) == {None, "standard"} and 60 < accepts.count("standard") < 140
    plain = _scenario(extra="jobs: {kind: synthetic, count: 400}\n")
    # Its own draws: the jobs are otherwise those of a trace without the field.
    assert [(j.submit_s, j.duration_s) for j in load_jobs(plain)] == [(j.submit_s, j.duration_s)
                                                                      for j in load_jobs(mixed)]
    for bad, message in (("{flex-start: 1}", "flex-start is not in cluster c's provisioning ['spot', 'standard']"),
                         ("{spotty: 1}", "unknown provisioning model 'spotty'"),
                         ("{standard: 0}", "the weight of standard must be > 0")):
        with pytest.raises(ScenarioError, match="line 7: jobs.provisioning: " + re.escape(message)):
            _scenario(extra=f"jobs: {{kind: synthetic, count: 3, provisioning: {bad}}}\n")  # refused at load, its line named


def test_a_csv_trace_may_say_what_each_job_accepts(tmp_path):
    from zen_dev.sim.jobs import JobTraceError, csv_jobs
    scenario = _scenario()
    path = tmp_path / "jobs.csv"
    path.write_text("job_id,submit_s,duration_s,cluster,provisioning\na,0,60,c,standard\nb,5,60,c,any\nc,9,60,c,\n")
    assert [job.provisioning for job in csv_jobs(path, scenario.clusters)] == ["standard", None, None]
    path.write_text("job_id,submit_s,duration_s,cluster,provisioning\na,0,60,c,flex-start\n")
    with pytest.raises(JobTraceError, match="line 2: provisioning 'flex-start' is not in cluster c's provisioning"):
        csv_jobs(path, scenario.clusters)


def test_a_standard_share_takes_the_same_jobs_for_every_share_and_more_as_it_grows():
    from zen_dev.sim.dollars import with_standard_share
    jobs = [SimJob(f"job-{i:06d}", "c", float(i), 60.0, ("r1",)) for i in range(2000)]
    tenth, fifth = (sum(j.provisioning == "standard" for j in with_standard_share(jobs, s)) for s in (0.1, 0.2))
    assert 150 < tenth < 250 and 320 < fifth < 480
    chosen = {j.job_id for j in with_standard_share(jobs, 0.1) if j.provisioning}
    assert chosen <= {j.job_id for j in with_standard_share(jobs, 0.2) if j.provisioning}
    assert not any(j.provisioning for j in with_standard_share(jobs, 0.0))
    assert all(j.provisioning == "standard" for j in with_standard_share(jobs, 1.0))
