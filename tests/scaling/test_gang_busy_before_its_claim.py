"""A gang node's VM heartbeat recorded before its claim: the agent sends its claim (a CLAIMED job heartbeat) and,
apart, a VM heartbeat saying BUSY with the gang's attempt, and different function instances handle them in either
order (the claim may wait on the job row's lock while another node claims). With the BUSY recorded first, a pass
saw the gang still needing both its nodes while that VM, busy, was no supply: no pool had the gang's two VMs, the
cluster's ``max_vms`` left no room, and the pass deleted the VM still booting for the gang's other node as a lost
race, so the gang waited for a whole new boot (billed) or for its assembly deadline.

Real Postgres, the Compute stand-in through the official client, the functions through the in-process invoker:
the BUSY heartbeat is handled, then a tick's pass runs, then the claim, so the order is the same on every run."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.scaling.test_gang_claim_during_a_pass import REGION, booted_pair, config, deleted  # noqa: F401 - fixtures
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, build_stack, vm_beat


def busy_with(name: str, job_id: str, attempt: int, seq: int, at: str) -> dict:
    """The VM heartbeat an agent sends as it takes an attempt (its state changed): BUSY, naming the attempt."""
    return {**vm_beat(name, REGION, "BUSY", seq, sent_at=at), "job_id": job_id, "attempt": attempt}


def test_a_booting_vm_a_gang_needs_is_kept_when_a_nodes_busy_word_comes_before_its_claim(booted_pair, db, clock):
    fn, first, second, names = booted_pair
    fn.heartbeat(vm_beat(first.name, REGION, "IDLE", 1, sent_at=clock().isoformat()))
    fn.heartbeat(busy_with(first.name, "pair", 1, 2, clock().isoformat()))  # its claim not recorded yet
    fn.tick()  # a pass between the two
    assert not (gone := deleted(db)) and names() == [first.name, second.name], gone

    # The claim comes, then the other node's agent, which claims the rest: the gang runs on the VMs it booted.
    fn.heartbeat(heartbeat("pair", "CLAIMED", 3, vm=first.name, region=REGION, zone=first.zone))
    fn.heartbeat(vm_beat(second.name, REGION, "IDLE", 1, sent_at=clock().isoformat()))
    fn.heartbeat(heartbeat("pair", "CLAIMED", 2, vm=second.name, region=REGION, zone=second.zone))
    with db.transaction() as session:
        job = session.sql("SELECT status, gang FROM jobs WHERE job_id = 'pair'")[0]
    assert job["status"] == "ASSIGNED" and [n["vm"] for n in job["gang"]] == [first.name, second.name], job


def test_a_gang_whose_next_node_is_busy_before_its_claim_is_not_released_for_room(
        config, db, publisher, clock, monkeypatch, tmp_path):
    """The tick's look at gangs right after its pass (the room the pass found where a gang assembles): a node in
    flight is on its way into the gang, so the gang's region lacks nothing. Counted as a node still missing against
    that room (the VM busy, no supply), the gang was released and its start sent to its other region, its two VMs
    given back, as if its region had no room for it."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    try:
        fn = FunctionsInvoker(zen)
        fn.submit(job_request("pair", nodes=2, regions=[REGION, "europe-west4"]))
        advance(BOOT_S + 1)
        first, second = instances(REGION)
        fn.heartbeat(vm_beat(first.name, REGION, "IDLE", 1, sent_at=clock().isoformat()))
        fn.heartbeat(heartbeat("pair", "CLAIMED", 2, vm=first.name, region=REGION, zone=first.zone))  # node 0
        advance(5)
        fn.heartbeat(vm_beat(second.name, REGION, "IDLE", 1, sent_at=clock().isoformat()))  # a pass: room for node 1
        advance(5)
        fn.heartbeat(busy_with(second.name, "pair", 1, 2, clock().isoformat()))  # its claim not recorded yet
        fn.tick()
        with db.transaction() as session:
            job = session.sql("SELECT status, attempt, gang FROM jobs WHERE job_id = 'pair'")[0]
        assert job["attempt"] == 1 and [n["vm"] for n in job["gang"] or ()] == [first.name], job

        fn.heartbeat(heartbeat("pair", "CLAIMED", 3, vm=second.name, region=REGION, zone=second.zone))
        with db.transaction() as session:
            job = session.sql("SELECT status, gang FROM jobs WHERE job_id = 'pair'")[0]
        assert job["status"] == "ASSIGNED" and [n["vm"] for n in job["gang"]] == [first.name, second.name], job
    finally:
        standin.stop()


def test_a_gang_whose_first_node_is_in_flight_is_demand_only_in_that_nodes_region(functions, zen, clock):
    """The first claim narrows a gang's start to its node's region (zen.core.gang): a node in flight, its claim not
    recorded yet, is in the region the gang assembles in. Its demand was the rest of the gang in every region it
    allows, so a pass asked for the other node in the first of them, a VM that booted for nothing (its claim
    released: the gang assembles where the node in flight claims), and the gang waited for a pass and a new boot."""
    from tests.scaling.test_gang_demand import plan_for, vm
    from zen.scaling.fleetdb import demand_groups
    from zen.scaling.model import VmPhase
    from zen.store import fleet

    functions.submit(job_request("pair", nodes=2))  # allowed: us-central1 first, us-west1, europe-west4
    functions.heartbeat(busy_with("vm-w", "pair", 1, 1, clock().isoformat()))  # in us-west1, its claim on the way
    with zen.db.transaction() as session:
        [row] = fleet.queued_demand(session, CLUSTER, clock(), 600)
    assert (row["need"], list(row["regions"])) == (1, [REGION]), row
    [group] = demand_groups([row], zen.config.cluster(CLUSTER))
    assert {pool.split("/")[0] for pool in group.regions} == {REGION}, group
    assert plan_for(group, vms=[vm("vm-w", REGION, VmPhase.BUSY, job="pair")]).add == {REGION: 1}  # not us-central1

    functions.heartbeat(heartbeat("pair", "CLAIMED", 2, vm="vm-w", region=REGION, zone=f"{REGION}-a"))
    with zen.db.transaction() as session:  # its claim recorded: the claim narrows it, as before
        [row] = fleet.queued_demand(session, CLUSTER, clock(), 600)
    assert (row["need"], list(row["regions"])) == (1, [REGION]), row
