"""A MIG deleted by hand (Compute answers 404 for it, every tick from then on) holds no VM: it counted the VMs it last
listed toward the cluster's ``max_vms`` for ever (``unread.last_known_size``, as for a 429 or a 5xx), and 8 queued
jobs got 4 VMs. Real Postgres, the Compute stand-in through the official client."""
from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, build_stack

REGIONS = ("us-central1", "us-west1", "europe-west4")


@pytest.fixture
def made(config, db, publisher, clock, monkeypatch, tmp_path):
    built = build_stack(config, db, publisher, clock, monkeypatch, tmp_path, capacity={"default": 4})
    yield built
    built[-1].stop()


def test_a_mig_deleted_by_hand_holds_none_of_the_clusters_room(made, config):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances, standin = made
    fn = FunctionsInvoker(zen)
    for i in range(4):  # us-west1 filled: 4 of the cluster's max_vms 8
        fn.submit(job_request(f"w{i}", regions=["us-west1"]))
    advance(BOOT_S + 1)
    fn.tick()
    assert len(instances("us-west1")) == 4
    # Someone deletes the us-west1 MIG by hand (its VMs go with it): every read of it is a 404 from now on.
    name = config.cluster(CLUSTER).mig_name("us-west1")
    with standin.world.lock:
        standin.world.migs.pop(("us-west1", name))
    for i in range(8):
        fn.submit(job_request(f"a{i}", regions=["us-central1", "europe-west4"]))
    for _ in range(3):  # three minutes of ticks (no agent runs here: VMs are counted before they count as silent)
        advance(60)
        fn.tick()
    with zen.db.transaction() as session:
        got = [(r["action"], r["region"], r["reason"]) for r in
               session.run("recent_scaling_decisions", cluster=CLUSTER, limit=20)]
    vms = len(instances("us-central1")) + len(instances("europe-west4"))
    # No VM of the cluster exists in us-west1 any more: 8 jobs wait with room for 8 VMs in the other regions.
    short = [d for d in got if "cluster limit" in d[2]]
    assert vms == 8, (f"{vms} VMs for 8 queued jobs after 3 minutes; the cluster's max_vms 8 counts the deleted MIG's 4; "
                      f"{short[:1]}")
