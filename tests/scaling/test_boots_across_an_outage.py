"""Zen down while a VM it asked for boots: the VM got capacity just before the outage, its agent came up and
reported (IDLE), but those reports wait in Pub/Sub. A booting VM's time to become usable counts from when Zen could
hear again (``zen.store.fleet.heard_since``), and a boot across the outage is not learnt as the pool's: the first
tick after the outage deleted such VMs as never usable, blocked their regions (the cluster's image taken for broken
with three), and learnt the outage's length as the pool's boot (1,801 s)."""

from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, build_stack, vm_beat
from zen.store import repository


def _decisions(zen):
    with zen.db.transaction() as session:
        return [(r["action"], r["region"], r["reason"]) for r in
                session.run("recent_scaling_decisions", cluster=CLUSTER, limit=200)]


def test_a_vm_booted_before_an_outage_is_not_deleted_as_never_usable_on_the_first_tick(config, db, publisher, clock,
                                                                              monkeypatch, tmp_path):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    try:
        fn = FunctionsInvoker(zen)
        for _ in range(5):  # a steady schedule
            fn.tick()
            advance(60)
        fn.submit(job_request("a", regions=["us-west1"]))
        advance(BOOT_S + 1)
        fn.tick()  # the VM is listed RUNNING: it got capacity
        [vm] = instances("us-west1")
        assert vm.running
        before = len(_decisions(zen))
        # Zen goes down for 30 minutes; the agent comes up and sends IDLE every minute; nothing is delivered.
        outage_start = clock()
        advance(30 * 60)
        fn.tick()  # the first tick after the outage, before the backlog came through
        decisions = _decisions(zen)[: len(_decisions(zen)) - before]
        assert [i.name for i in instances("us-west1")] == [vm.name], decisions
        assert not any(a == "BLOCK" for a, _, _ in decisions), decisions
    finally:
        standin.stop()


def test_a_boot_across_an_outage_is_not_learnt_as_the_pools(config, db, publisher, clock, monkeypatch, tmp_path):
    """The backlog comes first, then the tick: the VM's boot must not be learnt as the outage's length."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    try:
        fn = FunctionsInvoker(zen)
        for _ in range(5):
            fn.tick()
            advance(60)
        fn.submit(job_request("a", regions=["us-west1"]))
        fn.tick()  # the VM is booting
        up_at = clock()
        advance(BOOT_S + 1)
        [vm] = instances("us-west1")
        sent = clock()  # its agent's first IDLE, sent now, delivered after a 30-minute outage
        advance(30 * 60)
        fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 1, sent_at=sent.isoformat()))
        fn.tick()
        with zen.db.transaction() as session:
            memory = {r["region"]: r["memory"] for r in session.run("scaling_memory", cluster=CLUSTER)}
        boot_s = (memory.get("us-west1") or {}).get("boot_s")
        assert boot_s is None or boot_s < 600, boot_s
    finally:
        standin.stop()


def test_three_vms_booting_across_an_outage_do_not_block_the_cluster_as_a_broken_image(config, db, publisher, clock,
                                                                                       monkeypatch, tmp_path):
    """Three jobs, one per region, their VMs got capacity just before a 30-minute outage; their agents came up
    (their IDLE waits in Pub/Sub): none is deleted, no region blocked."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path,
                                                   capacity={"default": 4})
    try:
        fn = FunctionsInvoker(zen)
        for _ in range(5):
            fn.tick()
            advance(60)
        regions = ["us-central1", "us-west1", "europe-west4"]
        for i, region in enumerate(regions):
            fn.submit(job_request(f"j{i}", regions=[region]))
        advance(BOOT_S + 1)
        fn.tick()
        vms = {region: [i.name for i in instances(region)] for region in regions}
        assert all(len(v) >= 1 for v in vms.values()), vms
        advance(30 * 60)  # Zen is down; the agents are up and say IDLE, undelivered
        fn.tick()  # the first tick after the outage
        for region in regions:  # the backlog arrives: every agent was up all along
            for n, name in enumerate(vms[region]):
                fn.heartbeat(vm_beat(name, region, "IDLE", 10 + n, sent_at=clock().isoformat()))
        fn.tick()
        with zen.db.transaction() as session:
            memory = {r["region"]: r["memory"] for r in session.run("scaling_memory", cluster=CLUSTER)}
        blocked = {r: (m or {}).get("blocked_until") for r, m in memory.items()}
        left = {region: [i.name for i in instances(region)] for region in regions}
        decisions = [d for d in _decisions(zen) if d[0] in ("BLOCK", "DELETE")]
        assert left == vms, (left, decisions)
        assert not any(blocked.values()), blocked
    finally:
        standin.stop()
