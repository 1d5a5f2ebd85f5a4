"""A job's provisioning models and start bound: refused with the field named when its cluster cannot
serve them, stored with the job, shown by `zen jobs get`, and counted as demand by pool (the cluster's
regions x the models the jobs accept) with the jobs' start bound."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from tests.messages import heartbeat, job_request
from tests.test_bad_input import snapshot
from zen.cli.main import main
from zen.core.config import ClusterConfig, ZenConfig
from zen.scaling.fleetdb import FleetDb
from zen.scaling.pricing import cluster_pools
from zen.store import repository

MIXED = "4xa100-40gb"  # given [spot, standard, flex-start] here; 8xa100-40gb keeps its one model (standard)


@pytest.fixture
def mixed(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == MIXED:
            cluster.update(provisioning=["spot", "standard", "flex-start"], max_start_wait_s=900,
                           flex_start_min_wait_s=300, flex_start_run_s=86400)
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


REFUSED = [
    (dict(provisioning="ondemand"), "provisioning: unknown provisioning model 'ondemand'"),
    (dict(provisioning="Any"), "unknown provisioning model 'Any'; known: spot, standard, flex-start, or any (every"),
    (dict(cluster="8xa100-40gb", provisioning="spot"),
     "provisioning: cluster 8xa100-40gb does not use spot VMs (its models: standard)"),
    (dict(provisioning="flex-start", max_start_wait_s=60), "max_start_wait_s: 60 s is below the 300 s flex-start"),
    (dict(provisioning="flex-start", max_start_wait_s=600, max_runtime_s=2 * 86400),
     "max_runtime_s: 172800 s is above how long a flex-start VM of cluster 4xa100-40gb runs (86400 s"),
    (dict(provisioning="flex-start", max_start_wait_s=600),  # no max_runtime_s: the limit's was named as the job's
     "max_runtime_s: 604800 s (none given: the limit, limits.max_runtime_s) is above how long a flex-start VM"),
    (dict(max_start_wait_s=-1), "max_start_wait_s: Input should be greater than or equal to 0"),
    (dict(cluster=None, gpu_types=["nvidia-tesla-a100"], gpu_count=8, provisioning="spot"),
     "8xa100-40gb does not use spot VMs"),
]


@pytest.mark.parametrize("fields, reason", REFUSED, ids=[r for _, r in REFUSED])
def test_what_no_model_of_the_cluster_can_serve_is_refused_naming_the_field(mixed, fields, reason):
    zen, functions = mixed
    response = functions.send("on_job_submitted", json.dumps(job_request("p1", **fields)).encode(), message_id="m1")
    assert response.status_code == 200  # refused for good: acked
    jobs, history, rejected = snapshot(zen)
    assert jobs == [] and history == []  # nothing half-applied
    assert len(rejected) == 1 and reason in rejected[0]["reason"], rejected


def test_accepted_choices_are_stored_and_shown(mixed, capsys):
    zen, functions = mixed
    functions.submit(job_request("p2", provisioning="flex-start", max_start_wait_s=1800, max_runtime_s=3600))
    functions.submit(job_request("p3"))
    assert main(["jobs", "get", "p2", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["status"], got["provisioning"], got["max_start_wait_s"]) == ("QUEUED", "flex-start", 1800)
    assert main(["jobs", "get", "p3"]) == 0
    assert "provisioning: any" in capsys.readouterr().out


@pytest.mark.parametrize("change, reason", [
    (dict(provisioning=["spot", "standard"]), "cluster 4xa100-40gb no longer lists flex-start, the one provisioning "
     "model the job accepts (the cluster's: spot, standard)"),
    (dict(regions=["us-central1"]), "cluster 4xa100-40gb no longer runs in us-west1, the regions the job allows"),
    (dict(flex_start_run_s=1800), "its max_runtime_s (3600 s) is now above how long a flex-start VM of cluster "
     "4xa100-40gb runs (flex_start_run_s 1800 s), the one model it accepts"),
])
def test_a_queued_job_the_configuration_no_longer_serves_says_why_it_waits(mixed, db, publisher, clock, change, reason):
    """The configuration changed while the job was queued: no demand counts it and no VM may claim it.
    `zen explain` and the console's job page said only "waiting for a VM": it waited with no reason to act on."""
    from zen.app import Zen
    from zen.cli.queues import explain_line

    zen, functions = mixed
    functions.submit(job_request("f1", provisioning="flex-start", regions=["us-west1"], max_start_wait_s=600,
                                 max_runtime_s=3600))
    raw = json.loads(zen.config.model_dump_json())
    [cluster] = [c for c in raw["clusters"] if c["name"] == MIXED]
    cluster.update(change)
    after = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    cluster = after.config.cluster(MIXED)
    assert not {p for g in FleetDb(after.db, {MIXED: cluster}).facts(MIXED, clock()).demand
                for p in g.regions} & set(cluster.pools())  # no pool the planner manages
    with after.db.transaction() as session:
        job = repository.get_job(session, "f1")
        why = explain_line(session, after.config, job)
    assert job.status.value == "QUEUED" and f"no VM can take it: {reason}" in why, why
    assert why.endswith("the job waits until the configuration has it again, or stop it and submit it again")


def test_a_flex_start_job_that_named_no_max_runtime_is_not_taken_for_stranded_by_a_shorter_run(mixed, db, publisher,
                                                                                                clock):
    """Its max_runtime_s column holds the limits' default when it named none; demand and claims hold only a named
    one against a flex-start run, and so does the explanation (it told a job still served to stop)."""
    from zen.app import Zen
    from zen.cli.queues import explain_line

    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(mixed[0].config.model_dump_json())
    [cluster] = [c for c in raw["clusters"] if c["name"] == MIXED]
    cluster.update(flex_start_run_s=7 * 86400)  # as long as the limits' max_runtime_s: accepted without one
    FunctionsInvoker(Zen(ZenConfig.model_validate(raw), db, publisher, clock)).submit(
        job_request("f2", provisioning="flex-start", max_start_wait_s=600))
    cluster.update(flex_start_run_s=86400)  # then shortened
    after = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    cluster = after.config.cluster(MIXED)
    demand = {p for g in FleetDb(after.db, {MIXED: cluster}).facts(MIXED, clock()).demand for p in g.regions}
    assert {p for p in cluster.pools() if p.endswith("/flex-start")} <= demand
    with after.db.transaction() as session:
        why = explain_line(session, after.config, repository.get_job(session, "f2"))
    assert "no VM can take it" not in why and "waiting for a VM" in why, why


def test_demand_comes_by_pool_with_each_groups_start_bound(mixed):
    zen, functions = mixed
    functions.submit(job_request("a1"))  # any: every pool of every region, region by region
    functions.submit(job_request("a2"))
    functions.submit(job_request("s1", provisioning="spot", regions=["us-west1"]))
    functions.submit(job_request("f1", provisioning="flex-start", max_start_wait_s=3600, priority=5,
                                   max_runtime_s=3600))
    functions.submit(job_request("w1", provisioning="standard", max_start_wait_s=0))
    cluster = zen.config.cluster(MIXED)
    demand = {(g.priority, g.regions, g.max_wait_s): g.count
              for g in FleetDb(zen.db, {MIXED: cluster}).facts(MIXED, zen.clock()).demand}
    regions = cluster.regions
    assert demand == {  # a bound the jobs did not name is None: the planner holds them to the cluster's (900 s)
        (0, cluster.pools(), None): 2,
        (0, ("us-west1",), None): 1,  # spot is the primary model: its pool is the bare region
        (5, tuple(f"{r}/flex-start" for r in regions), 3600.0): 1,
        (0, tuple(f"{r}/standard" for r in regions), 0.0): 1,
    }
    assert cluster.pools()[:3] == ("us-central1", "us-central1/standard", "us-central1/flex-start")
    assert all(g.checkpoint_every_s is None for g in FleetDb(zen.db, {MIXED: cluster}).facts(MIXED, zen.clock()).demand)


def test_a_one_model_cluster_keeps_its_regions_as_pools(functions, zen):
    functions.submit(job_request("o1", cluster="8xa100-40gb"))
    functions.submit(job_request("o2", cluster="8xa100-40gb", provisioning="standard"))  # the same pools
    cluster = zen.config.cluster("8xa100-40gb")
    groups = FleetDb(zen.db, {cluster.name: cluster}).facts(cluster.name, zen.clock()).demand
    # Two groups all the same: a VM of the MIG's booted as spot before the cluster's models were narrowed takes o1,
    # not o2 (tests/test_spot_vm_no_supply_for_standard_only.py)
    assert sorted((g.regions, g.count, g.max_wait_s, g.accepts or "") for g in groups) == [
        (tuple(cluster.regions), 1, None, ""), (tuple(cluster.regions), 1, None, "standard")]
    assert cluster_pools(cluster) == {r: cluster_pools(cluster)[r] for r in cluster.regions}


def test_the_cluster_checks_its_start_bounds():
    base = dict(name="c", gpu_type="nvidia-l4", gpu_count=1, regions=["us-central1"], max_vms_per_region=1,
                max_vms=1)
    with pytest.raises(ValidationError, match="max_start_wait_s .* is below flex_start_min_wait_s"):
        ClusterConfig(**base, provisioning=["flex-start"], max_start_wait_s=60, flex_start_min_wait_s=300)
    with pytest.raises(ValidationError, match="flex_start_run_s"):
        ClusterConfig(**base, flex_start_run_s=8 * 86400)
    mixed = ClusterConfig(**base, provisioning=["spot", "flex-start"])
    assert mixed.has_instance("zen-c-us-central1-flex-ab12", "us-central1")
    assert mixed.pool_of("zen-c-us-central1-flex-ab12", "us-central1") == "us-central1/flex-start"
    assert mixed.pool_of("zen-c-us-central1-ab12", "us-central1") == "us-central1"
    assert not mixed.has_instance("zen-c-us-central1-std-ab12", "us-central1")  # standard is not listed
    assert not mixed.has_instance("zen-c-us-central1-flex+zen-1+0", "us-central1")  # a pending flex-start VM


def test_zen_submit_sends_and_checks_the_choices(config, publisher, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert main(["submit", "--job-id", "c1", "--cluster", "1xl4", "--provisioning", "spot", "--", "true"]) == 1
    assert "provisioning: cluster 1xl4 does not use spot VMs" in capsys.readouterr().err
    assert main(["submit", "--job-id", "c2", "--cluster", "1xl4", "--provisioning", "standard",
                 "--max-start-wait", "120", "--", "true"]) == 0
    [message] = publisher.on("zen-job-submitted")
    assert {k: json.loads(message.data)[k] for k in ("provisioning", "max_start_wait_s")} == {
        "provisioning": "standard", "max_start_wait_s": 120}
    assert main(["submit", "--cluster", "1xl4", "--provisioning", "cheap", "--", "true"]) == 2
    assert "--provisioning: invalid choice: 'cheap'" in capsys.readouterr().err


def test_a_vm_of_a_model_the_job_does_not_accept_may_not_claim_it(mixed):
    zen, functions = mixed
    functions.submit(job_request("k1", provisioning="spot"))
    functions.heartbeat(heartbeat("k1", "CLAIMED", 1, vm="zen-4xa100-40gb-us-central1-std-ab12"))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "k1").status.value == "QUEUED"
        [refused] = repository.list_rejections(session)
    assert "is a standard VM, and the job accepts spot VMs only" in refused["reason"]
    functions.heartbeat(heartbeat("k1", "CLAIMED", 2, vm="zen-4xa100-40gb-us-central1-ab12"))  # a spot VM
    with zen.db.transaction() as session:
        assert repository.get_job(session, "k1").status.value == "ASSIGNED"


def test_a_created_job_names_the_pools_a_spare_vm_must_be_in_to_cover_it(mixed):
    """The cheap coverage check after a submission (zen.scaling.coverage): an idle spot VM does not
    cover a job that accepts standard VMs only."""
    from zen.scaling.coverage import Coverage

    from zen.jobs.placement import job_pools
    from zen.store import repository

    zen, functions = mixed
    regions = zen.config.cluster(MIXED).regions
    functions.submit(job_request("std", provisioning="standard"))
    functions.submit(job_request("any"))
    with zen.db.transaction() as session:
        only_standard, any_model = (job_pools(zen.config, repository.get_job(session, j)) for j in ("std", "any"))
    assert only_standard == tuple(f"{r}/standard" for r in regions)
    spare_spot = Coverage(zen.clock(), {regions[0]: 1}, saturated=False)
    assert not spare_spot.covers(zen.clock(), regions=only_standard)
    assert spare_spot.covers(zen.clock(), regions=any_model)


def test_a_flex_start_vm_whose_run_ends_before_the_jobs_max_runtime_may_not_claim_it(mixed):
    """A flex-start VM runs ``flex_start_run_s`` (a day here): one heard from 20 hours ago has about 4 hours
    left, less its boot. A job that may run 4 hours would be ended by GCE there, and run again: its claim is
    refused naming the times; a 2-hour job takes the VM, and so does the 4-hour job a VM just come up. A job
    that names no max_runtime_s (stored as the configured cap, 7 days) is not held to it: its run time is not
    known, and most jobs run far less than the cap."""
    zen, functions = mixed
    old, new = "zen-4xa100-40gb-us-central1-flex-ab12", "zen-4xa100-40gb-us-central1-flex-cd34"
    other = "zen-4xa100-40gb-us-central1-flex-ef56"
    beat = {"kind": "vm", "cluster": MIXED, "region": "us-central1", "zone": "us-central1-a", "state": "IDLE"}
    functions.heartbeat(beat | {"vm": old, "seq": 1, "sent_at": zen.clock().isoformat()})
    functions.heartbeat(beat | {"vm": other, "seq": 1, "sent_at": zen.clock().isoformat()})
    zen.clock.advance(20 * 3600)
    functions.submit(job_request("f-open"))  # any model: flex-start alone would need a max_runtime_s within its run
    functions.heartbeat(heartbeat("f-open", "CLAIMED", 2, vm=other))
    left = 4 * 3600 - zen.config.scaling.boot_estimate_s
    flex = dict(provisioning="flex-start", max_start_wait_s=600)
    functions.submit(job_request("f-long", max_runtime_s=4 * 3600, **flex))
    functions.submit(job_request("f-short", max_runtime_s=2 * 3600, **flex))
    functions.heartbeat(heartbeat("f-long", "CLAIMED", 2, vm=old))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "f-long").status.value == "QUEUED"
        [refused] = repository.list_rejections(session)
    assert (f"VM {old} is a flex-start VM with about {int(left)} s of its run left (flex_start_run_s 86400), "
            "less than the job's max_runtime_s 14400") in refused["reason"], refused
    functions.heartbeat(heartbeat("f-short", "CLAIMED", 3, vm=old))
    functions.heartbeat(beat | {"vm": new, "seq": 1, "sent_at": zen.clock().isoformat()})
    functions.heartbeat(heartbeat("f-long", "CLAIMED", 2, vm=new))
    with zen.db.transaction() as session:
        assert [(j, repository.get_job(session, j).status.value, repository.get_job(session, j).vm)
                for j in ("f-short", "f-long", "f-open")] == [
            ("f-short", "ASSIGNED", old), ("f-long", "ASSIGNED", new), ("f-open", "ASSIGNED", other)]


def test_a_gang_node_waiting_past_the_fresh_window_is_not_refused_on_its_repeated_claim(mixed, publisher):
    """A node of a flex-start gang whose bound is the whole run claims on a fresh VM, and repeats its claim
    while the gang waits for its second node. Once its VM was heard from for 10 minutes, the repeat was held
    to the run's end and refused (RELEASE ``flex-ending``) while the node stayed in the gang: the gang was then
    confirmed to a VM that had let its claim go, and ran a node short. A node already in the gang is not
    checked again."""
    from zen.jobs.placement import job_pools
    from zen.store import repository

    zen, functions = mixed
    a, b = "zen-4xa100-40gb-us-central1-flex-ab12", "zen-4xa100-40gb-us-central1-flex-cd34"
    beat = {"kind": "vm", "cluster": MIXED, "region": "us-central1", "zone": "us-central1-a", "state": "IDLE"}
    functions.heartbeat(beat | {"vm": a, "seq": 1, "sent_at": zen.clock().isoformat()})
    functions.submit(job_request("g", nodes=2, provisioning="flex-start", max_start_wait_s=600, max_runtime_s=86400))
    zen.clock.advance(60)
    functions.heartbeat(heartbeat("g", "CLAIMED", 2, vm=a))
    zen.clock.advance(560)  # heard from for 620 s: the repeat comes every claim_timeout_s while the gang waits
    functions.heartbeat(heartbeat("g", "CLAIMED", 3, vm=a))
    functions.heartbeat(beat | {"vm": b, "seq": 1, "sent_at": zen.clock().isoformat()})
    functions.heartbeat(heartbeat("g", "CLAIMED", 2, vm=b))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "g")
        rejections = [r["reason"] for r in repository.list_rejections(session)]
    orders = [(m.attributes.get("vm"), m.attributes.get("action")) for m in publisher.on("zen-vm-control")]
    assert (job.status.value, [node.vm for node in job.gang or []]) == ("ASSIGNED", [a, b]), rejections
    assert (a, "RELEASE") not in orders and (a, "CONFIRM") in orders and (b, "CONFIRM") in orders, orders
    assert not rejections, rejections


def test_a_job_that_may_run_longer_than_any_flex_start_run_stays_off_flex_start_vms(mixed):
    """A job accepting any model whose max_runtime_s (3 days) outlasts every flex-start VM's run (a day here)
    was claimed by a fresh flex-start VM (the one asked for a job is not held to the run's end) and ended by
    GCE a day in, then placed on flex-start again; its demand listed the flex-start pools, the cheapest. Now
    no flex-start VM takes it, and its demand lists the cluster's other pools only."""
    from zen.scaling.fleetdb import demand_groups
    from zen.jobs.placement import job_pools
    from zen.store import repository

    zen, functions = mixed
    vm = "zen-4xa100-40gb-us-central1-flex-ab12"
    beat = {"kind": "vm", "cluster": MIXED, "region": "us-central1", "zone": "us-central1-a", "state": "IDLE"}
    functions.submit(job_request("long", max_runtime_s=3 * 86400))
    functions.heartbeat(beat | {"vm": vm, "seq": 1, "sent_at": zen.clock().isoformat()})
    functions.heartbeat(heartbeat("long", "CLAIMED", 2, vm=vm))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "long")
        [refused] = repository.list_rejections(session)
    assert job.status.value == "QUEUED", job
    assert (f"VM {vm} is a flex-start VM, whose run ends after 86400 s (flex_start_run_s), less than the job's "
            "max_runtime_s 259200") in refused["reason"], refused
    cluster = zen.config.cluster(MIXED)
    row = {"priority": 0, "regions": cluster.regions, "provisioning": None, "jobs": 1, "oldest": zen.clock(),
           "longest": 3 * 86400}
    [group] = demand_groups([row], cluster)
    assert group.regions and not any(pool.endswith("/flex-start") for pool in group.regions), group.regions
    [short] = demand_groups([row | {"longest": 3600}], cluster)
    assert any(pool.endswith("/flex-start") for pool in short.regions), short.regions


def test_a_flex_start_vm_slow_to_boot_counts_its_run_from_when_it_ran_not_from_its_agents_first_word(mixed):
    """GCE counts a flex-start VM's run from when its VM is RUNNING (where it sets its termination time), not
    from when its agent first speaks: a VM whose startup took an hour (a large image, drivers) has an hour less
    than its agent's first word less the boot estimate says. A scaling pass saw it billed then
    (``mig_instances.running_at``): a job that would outlast what is truly left of its run is refused."""
    from zen.store import fleet

    zen, functions = mixed
    vm = "zen-4xa100-40gb-us-central1-flex-ab12"
    with zen.db.transaction() as session:  # the tick lists its VM RUNNING: GCE's run starts here
        fleet.see_instances(session, MIXED, "us-central1/flex-start", [vm], zen.clock(), model="flex-start")
    zen.clock.advance(3600)  # an hour of startup before its agent's first word
    beat = {"kind": "vm", "cluster": MIXED, "region": "us-central1", "zone": "us-central1-a", "state": "IDLE"}
    functions.heartbeat(beat | {"vm": vm, "seq": 1, "sent_at": zen.clock().isoformat()})
    zen.clock.advance(19 * 3600)  # 20 hours into its day-long run: 4 hours left, whatever its agent says
    flex = dict(provisioning="flex-start", max_start_wait_s=600)
    functions.submit(job_request("f-long", max_runtime_s=4 * 3600 + 600, **flex))
    functions.submit(job_request("f-short", max_runtime_s=3 * 3600, **flex))
    functions.heartbeat(heartbeat("f-long", "CLAIMED", 2, vm=vm))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "f-long").status.value == "QUEUED"
        refused = [r["reason"] for r in repository.list_rejections(session)]
    assert [f"VM {vm} is a flex-start VM with about {4 * 3600} s of its run left (flex_start_run_s 86400), "
            "less than the job's max_runtime_s 15000 and the 900 s kept after it for its stop, last checkpoint and "
            "outputs' upload (deadlines.flex_end_margin_s)"] == [r[r.index("VM "):] for r in refused], refused
    functions.heartbeat(heartbeat("f-short", "CLAIMED", 3, vm=vm))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "f-short").status.value == "ASSIGNED"


def test_a_flex_start_vm_slow_to_boot_is_held_to_its_run_from_its_first_claim(mixed):
    """A VM whose agent first speaks an hour after its VM was RUNNING is not the fresh VM asked for the job, free of
    the check: a job bounded at its whole run less half an hour, claimed at that first word, would be deleted with
    its VM half an hour before its bound."""
    from zen.store import fleet

    zen, functions = mixed
    vm = "zen-4xa100-40gb-us-central1-flex-cd34"
    with zen.db.transaction() as session:
        fleet.see_instances(session, MIXED, "us-central1/flex-start", [vm], zen.clock(), model="flex-start")
    zen.clock.advance(3600)
    functions.submit(job_request("f-whole", max_runtime_s=86400 - 1800, provisioning="flex-start",
                                 max_start_wait_s=600))
    functions.heartbeat({"kind": "vm", "cluster": MIXED, "region": "us-central1", "zone": "us-central1-a",
                         "state": "IDLE", "vm": vm, "seq": 1, "sent_at": zen.clock().isoformat()})
    functions.heartbeat(heartbeat("f-whole", "CLAIMED", 2, vm=vm))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "f-whole").status.value == "QUEUED"
        [refused] = [r["reason"] for r in repository.list_rejections(session)]
    assert f"VM {vm} is a flex-start VM with about {86400 - 3600} s of its run left" in refused, refused
