"""A gang's start copies in the start subscriptions of regions other than the one it assembles in are stale once its
first node claims (zen.core.gang): a VM there that claims one is released, and no start goes out for it. Its copy
was its own region's subscription's, not one the gang's region needed: each such claim publishing the gang's
missing nodes' starts again piled copies into the gang's region, which its VMs then pulled and had refused one by
one, live jobs waiting behind them. Through the official client, against the Pub/Sub stand-in's filtered start
subscriptions (zen_dev.local.topology)."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import controls, job
from zen_dev.local.topology import ensure_topology

CLUSTER, NODES = "4xa100-40gb", 3
WEST = dict(region="us-west1", zone="us-west1-b")


def pull_all(subscriber, path) -> list:
    """Every message waiting in the subscription, leased and acked (what the agents there would take)."""
    taken = []
    while (response := subscriber.pull(subscription=path, max_messages=100, timeout=10)).received_messages:
        subscriber.acknowledge(subscription=path, ack_ids=[m.ack_id for m in response.received_messages])
        taken += [json.loads(m.message.data) for m in response.received_messages]
    return taken


def test_claims_of_stale_copies_elsewhere_add_no_copies_where_the_gang_assembles(functions, zen, publisher, config,
                                                                                 pubsub_clients):
    subscriber = pubsub_clients[1]
    ensure_topology(config, *pubsub_clients)
    central, west = (subscriber.subscription_path(config.project, config.job_start_subscription(CLUSTER, region))
                     for region in ("us-central1", "us-west1"))
    functions.submit(job_request("g", nodes=NODES, regions=["us-central1", "us-west1"]))

    first = subscriber.pull(subscription=central, max_messages=1, timeout=10).received_messages
    assert len(first) == 1
    functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm="vm-1", ip="10.0.0.1"))  # the gang assembles in us-central1
    subscriber.acknowledge(subscription=central, ack_ids=[first[0].ack_id])

    stale = pull_all(subscriber, west)  # one copy per node there too, published before the first claim
    assert [start["job_id"] for start in stale] == ["g"] * NODES
    for number in range(NODES):
        vm = f"vm-west-{number}"
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=f"10.0.1.{number}", **WEST))
        assert [c["action"] for c in controls(publisher, vm)] == ["RELEASE"]  # told to drop its copy

    left = pull_all(subscriber, central)
    assert len(left) == NODES - 1, f"{len(left)} copies of the gang's start in us-central1 for {NODES - 1} nodes"
    record = job(zen, "g")
    assert (record.status.value, [n.vm for n in record.gang]) == ("QUEUED", ["vm-1"])
