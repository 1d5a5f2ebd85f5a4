"""Zen makes the VMs' control subscriptions at the scale tick, each readable by its cluster's agent account
alone: the embedded Postgres (the MIG instances the passes listed), the Pub/Sub stand-in through the
official client (subscriptions and their IAM policies)."""

from __future__ import annotations

import pytest
from google.pubsub_v1 import types as T

from zen.adapters.control_subscriptions import ControlSubscriptions, accounts_from_env
from zen.store import fleet
from zen_dev.local.topology import ensure_topology

ACCOUNTS = {"4xa100-40gb": "zen-agent-a@p.iam.gserviceaccount.com", "8xh100-80gb": "zen-agent-b@p.iam.gserviceaccount.com"}


@pytest.fixture
def made(config, db, zen, pubsub_clients, clock):
    publisher, subscriber = pubsub_clients
    ensure_topology(config, publisher, subscriber)
    zen.controls = ControlSubscriptions(config, config.project, ACCOUNTS, subscriber)
    with db.transaction() as session:
        fleet.see_instances(session, "4xa100-40gb", "us-central1", ["zen-a-1", "zen-a-2"], clock())
    return subscriber


def path(config, vm):
    return f"projects/{config.project}/subscriptions/{config.vm_control_subscription(vm)}"


def granted(subscriber, name):
    return {(b.role, m) for b in subscriber.get_iam_policy(request={"resource": name}).bindings for m in b.members}


def test_the_tick_makes_each_instances_control_subscription_for_its_clusters_agents_alone(config, zen, made):
    assert zen.on_scale_tick().controls == 2

    for vm in ("zen-a-1", "zen-a-2"):
        sub = made.get_subscription(subscription=path(config, vm))
        assert sub.filter == f'attributes.vm = "{vm}"' and sub.topic.endswith("/topics/" + config.topics.vm_control)
        assert sub.expiration_policy.ttl.total_seconds() == 86_400
        assert granted(made, path(config, vm)) == {("roles/pubsub.subscriber", f"serviceAccount:{ACCOUNTS['4xa100-40gb']}")}
    assert zen.on_scale_tick().controls == 0  # done once per function instance


def test_a_subscription_someone_else_made_with_a_wrong_filter_is_not_granted(config, zen, made, pubsub_clients):
    made.create_subscription(request=T.Subscription(
        name=path(config, "zen-a-1"), topic=pubsub_clients[0].topic_path(config.project, config.topics.vm_control),
        filter='attributes.vm = "nobody"'))

    assert zen.on_scale_tick().controls == 1  # zen-a-2 only

    assert granted(made, path(config, "zen-a-1")) == set()


def test_accounts_come_from_the_environment():
    assert accounts_from_env({}) is None
    assert accounts_from_env({"ZEN_AGENT_ACCOUNTS": '{"c": "a@p.iam.gserviceaccount.com"}'}) == {"c": "a@p.iam.gserviceaccount.com"}
    with pytest.raises(ValueError):
        accounts_from_env({"ZEN_AGENT_ACCOUNTS": '["a"]'})
