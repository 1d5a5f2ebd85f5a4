"""A region dropped from a cluster (the configuration changed; terraform then destroys its MIG and its VMs) leaves
Zen's VM counts: ``zen watch`` and the console's clusters page (``zen.cli.watch.vms_per_region``) and ``zen stats``
(``zen_vms``) read ``mig_instances``, whose rows only a scaling pass over the pool that lists them forgot, and no
pass reads a pool the configuration no longer has: they stayed for ever. The planner's memory of that pool
stayed too, its VMs "booting", so ``ClusterOrchestrator.racing`` stayed true and every heartbeat that made a VM
of the cluster usable ran a full scaling pass. The tick forgets such pools (``fleet.forget_dropped_pools``)."""

from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, stack  # noqa: F401 - the fixture
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.app import Zen
from zen.scaling.fleetdb import FleetDb
from zen.scaling.manager import ClusterOrchestrator

DROPPED = "europe-west4"


def test_a_dropped_regions_vms_are_not_shown_for_ever(stack, config, db, publisher, clock):
    from zen.cli.watch import vms_per_region
    from zen.store import stats
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a"))
    fn.submit(job_request("b"))  # us-central1 stocked out: VMs asked in us-west1 and hedged in europe-west4
    fn.tick()  # a pass lists them all (mig_instances)
    booting = instances(DROPPED)
    assert booting, "the scenario needs a VM of the cluster in the region to drop"

    # The operator drops europe-west4 from the cluster; terraform destroys its MIG, and its VMs with it.
    clients = compute_clients_from_env()
    MigManager(config.project, DROPPED, config.cluster(CLUSTER).mig_name(DROPPED), *clients).delete_instances(
        [i.name for i in booting], {i.name: i.zone for i in booting})
    clusters = [c.model_copy(update={"regions": [r for r in c.regions if r != DROPPED]})
                if c.name == CLUSTER else c for c in config.clusters]
    changed = config.model_copy(update={"clusters": clusters})
    scaler = ClusterOrchestrator(changed, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients))
    after = FunctionsInvoker(Zen(changed, db, publisher, clock, scaler=scaler))
    advance(BOOT_S + 1)
    after.tick()
    advance(3600)
    after.tick()
    after.tick()  # a pass after the last deletions, which forgets them
    assert instances(DROPPED) == []  # nothing of the cluster runs there any more

    with db.transaction() as session:
        rows, total = vms_per_region(session)
        by_state = stats.run(session, "vms_by_state")
    shown = {(r["cluster"], r["region"]) for r in rows}
    assert (CLUSTER, DROPPED) not in shown, rows  # zen watch / the console: a VM of a region gone, for ever
    assert total == sum(len(instances(r)) for r in changed.cluster(CLUSTER).regions), (total, rows)
    assert not [r for r in by_state if r["region"] == DROPPED], by_state  # zen stats' zen_vms
    # ClusterOrchestrator.racing reads every memory row of the cluster: the dropped pool's still says a VM boots
    # there, so each heartbeat that makes a VM of the cluster usable runs a scaling pass (Zen.on_heartbeat).
    stale = {region: m for region, m in FleetDb(db).memory(CLUSTER).items() if region == DROPPED}
    assert not any(m.booting or m.sized > len(m.known) for m in stale.values()), stale


def test_a_dropped_pools_vms_still_listed_are_named_in_the_clusters_decisions(stack, config, db, publisher, clock):
    """Terraform had not destroyed the pool's MIG yet (or its apply failed): its VMs, billed, vanished from every
    view at the first tick under the new configuration, and nothing said so. The tick records a decision naming
    them (``zen explain CLUSTER``) and logs a warning."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a"))
    fn.submit(job_request("b"))
    fn.tick()
    left = sorted(i.name for i in instances(DROPPED))
    assert left, "the scenario needs a VM of the cluster in the region to drop"
    clients = compute_clients_from_env()
    clusters = [c.model_copy(update={"regions": [r for r in c.regions if r != DROPPED]})
                if c.name == CLUSTER else c for c in config.clusters]
    changed = config.model_copy(update={"clusters": clusters})
    scaler = ClusterOrchestrator(changed, db, clock, lambda p, r, n, model: MigManager(p, r, n, *clients))
    FunctionsInvoker(Zen(changed, db, publisher, clock, scaler=scaler)).tick()  # the MIG still there
    with db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    [said] = [d for d in decisions if d["region"] == DROPPED and d["action"] == "HOLD"]
    assert f"its last pass listed {len(left)} VM(s) ({', '.join(left)})" in said["reason"], said
    assert "billed until terraform destroys its MIG" in said["reason"]
