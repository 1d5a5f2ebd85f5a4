"""Zen makes the VMs' control subscriptions at the scale tick, each readable alone by the agent account its VM
runs as (its cluster's, for its region's tags): the embedded Postgres (the MIG instances the passes listed),
the Pub/Sub stand-in through the official client (subscriptions and their IAM policies)."""

from __future__ import annotations

import pytest
from google.api_core.exceptions import NotFound
from google.pubsub_v1 import types as T

from zen.adapters.control_subscriptions import RECHECK_S, ControlSubscriptions, accounts_from_env
from zen.store import fleet
from zen_dev.local.topology import ensure_topology

# What terraform sets: cluster -> region -> the account of that region's VMs (us-central1 carries other tags).
ACCOUNTS = {
    "4xa100-40gb": {"us-central1": "zen-ag-4xa100-40gb-521a2a@p.iam.gserviceaccount.com",
                    "us-west1": "zen-ag-4xa100-40gb@p.iam.gserviceaccount.com"},
    "8xh100-80gb": {"us-central1": "zen-ag-8xh100-80gb@p.iam.gserviceaccount.com"},
}
# What terraform set before accounts were per tag set: one account for all a cluster's regions.
FLAT_ACCOUNTS = {"4xa100-40gb": "zen-ag-4xa100-40gb@p.iam.gserviceaccount.com",
                 "8xh100-80gb": "zen-ag-8xh100-80gb@p.iam.gserviceaccount.com"}
REGION_OF = {"zen-a-1": "us-central1", "zen-a-2": "us-central1", "zen-a-3": "us-west1"}


@pytest.fixture
def made(config, db, zen, pubsub_clients, clock):
    publisher, subscriber = pubsub_clients
    ensure_topology(config, publisher, subscriber)
    zen.controls = ControlSubscriptions(config, config.project, ACCOUNTS, subscriber)
    with db.transaction() as session:
        fleet.see_instances(session, "4xa100-40gb", "us-central1", ["zen-a-1", "zen-a-2"], clock())
        fleet.see_instances(session, "4xa100-40gb", "us-west1", ["zen-a-3"], clock())
    return subscriber


def path(config, vm):
    return f"projects/{config.project}/subscriptions/{config.vm_control_subscription(vm)}"


def granted(subscriber, name):
    return {(b.role, m) for b in subscriber.get_iam_policy(request={"resource": name}).bindings for m in b.members}


def test_the_tick_makes_each_instances_control_subscription_for_its_regions_account_alone(config, zen, made):
    assert zen.on_scale_tick().controls == 3

    for vm, region in REGION_OF.items():
        sub = made.get_subscription(subscription=path(config, vm))
        assert sub.filter == f'attributes.vm = "{vm}"' and sub.topic.endswith("/topics/" + config.topics.vm_control)
        assert sub.expiration_policy.ttl.total_seconds() == 86_400
        account = ACCOUNTS["4xa100-40gb"][region]
        assert granted(made, path(config, vm)) == {("roles/pubsub.subscriber", f"serviceAccount:{account}")}
    assert zen.on_scale_tick().controls == 0  # done once per function instance


def test_one_account_for_all_a_clusters_regions_is_still_understood(config, zen, made):
    zen.controls = ControlSubscriptions(config, config.project, FLAT_ACCOUNTS, made)

    assert zen.on_scale_tick().controls == 3

    for vm in REGION_OF:
        assert granted(made, path(config, vm)) == {
            ("roles/pubsub.subscriber", f"serviceAccount:{FLAT_ACCOUNTS['4xa100-40gb']}")}


def test_a_region_without_an_account_is_not_granted(config, zen, made, caplog):
    only_central = {"4xa100-40gb": {"us-central1": ACCOUNTS["4xa100-40gb"]["us-central1"]}}
    zen.controls = ControlSubscriptions(config, config.project, only_central, made)

    assert zen.on_scale_tick().controls == 2  # zen-a-1 and zen-a-2

    with pytest.raises(NotFound):  # not even made: nobody could read it
        made.get_subscription(subscription=path(config, "zen-a-3"))
    assert any("no agent service account" in r.getMessage() and getattr(r, "region", None) == "us-west1"
               for r in caplog.records)


def test_a_subscription_someone_else_made_with_a_wrong_filter_is_not_granted(config, zen, made, pubsub_clients):
    made.create_subscription(request=T.Subscription(
        name=path(config, "zen-a-1"), topic=pubsub_clients[0].topic_path(config.project, config.topics.vm_control),
        filter='attributes.vm = "nobody"'))

    assert zen.on_scale_tick().controls == 2  # zen-a-2 and zen-a-3

    assert granted(made, path(config, "zen-a-1")) == set()


def test_accounts_come_from_the_environment():
    assert accounts_from_env({}) is None
    by_region = '{"c": {"us-central1": "a@p.iam.gserviceaccount.com", "us-west1": "b@p.iam.gserviceaccount.com"}}'
    assert accounts_from_env({"ZEN_AGENT_ACCOUNTS": by_region}) == {
        "c": {"us-central1": "a@p.iam.gserviceaccount.com", "us-west1": "b@p.iam.gserviceaccount.com"}}
    # the form before accounts per tag set (a function deployed before the apply that makes them)
    assert accounts_from_env({"ZEN_AGENT_ACCOUNTS": '{"c": "a@p.iam.gserviceaccount.com"}'}) == {
        "c": "a@p.iam.gserviceaccount.com"}


@pytest.mark.parametrize("raw", ['["a"]', '{"c": ""}', '{"c": 3}', '{"c": {}}', '{"c": {"us-west1": ""}}',
                                 '{"c": {"us-west1": ["a@p"]}}', "{c: a@p}"])
def test_a_malformed_accounts_value_is_refused_saying_what_is_expected(raw):
    with pytest.raises(ValueError, match=r"ZEN_AGENT_ACCOUNTS must be a JSON object of cluster name -> \{region"):
        accounts_from_env({"ZEN_AGENT_ACCOUNTS": raw})


def test_a_secondary_pools_vms_get_their_regions_account(config, zen, made):
    """The scaling passes record a secondary model's instances under its pool's key (us-central1/spot): no account
    was found for it, and a spot or flex-start VM of a cluster whose first model is standard never got its
    control subscription (its agent waited, exited and restarted, never claiming anything)."""
    with zen.db.transaction() as session:
        fleet.see_instances(session, "4xa100-40gb", "us-central1/spot", ["zen-a-spot-1"], zen.clock())
    assert zen.on_scale_tick().controls == 4
    account = ACCOUNTS["4xa100-40gb"]["us-central1"]
    assert granted(made, path(config, "zen-a-spot-1")) == {("roles/pubsub.subscriber", f"serviceAccount:{account}")}


def test_a_subscription_gone_is_made_again_when_its_instance_is_looked_at_again(config, zen, made):
    """Remembered as made for the life of the function instance, one that went (its TTL passed unread) was never
    made again: its VM got no order from then on, a STOP included."""
    now = [0.0]
    zen.controls = ControlSubscriptions(config, config.project, ACCOUNTS, made, clock=lambda: now[0])
    assert zen.on_scale_tick().controls == 3
    made.delete_subscription(subscription=path(config, "zen-a-1"))
    now[0] += 60
    assert zen.on_scale_tick().controls == 0  # looked at again only RECHECK_S after
    now[0] += RECHECK_S
    assert zen.on_scale_tick().controls == 3
    assert made.get_subscription(subscription=path(config, "zen-a-1")).filter == 'attributes.vm = "zen-a-1"'


def test_the_subscription_of_an_instance_gone_from_its_mig_is_deleted_leaving_room_for_new_ones(
        config, zen, made, pubsub_clients, monkeypatch):
    """Left to expire a day after its VM went, each removed VM's subscription stayed attached to zen-vm-control:
    VMs made and removed by the thousand a day filled the topic's 10,000 (the Pub/Sub stand-in refuses a create
    past the limit, as Pub/Sub does), and each new VM got none: its agent waited for it, exited, and its VM was
    deleted and replaced, while queued jobs waited and no VM could be stopped by message."""
    from zen_dev.local.pubsub import resources

    topic = pubsub_clients[0].topic_path(config.project, config.topics.vm_control)
    attached = len(list(pubsub_clients[0].list_topic_subscriptions(topic=topic)))
    monkeypatch.setattr(resources, "MAX_SUBSCRIPTIONS_PER_TOPIC", attached + 3)  # the topic's room: 3 (the fleet)
    assert zen.on_scale_tick().controls == 3
    with zen.db.transaction() as session:  # zen-a-1 and zen-a-2 were deleted; zen-a-4 and zen-a-5 came
        fleet.see_instances(session, "4xa100-40gb", "us-central1", ["zen-a-4", "zen-a-5"], zen.clock())

    assert zen.on_scale_tick().controls == 2

    for vm in ("zen-a-4", "zen-a-5"):
        assert made.get_subscription(subscription=path(config, vm)).filter == f'attributes.vm = "{vm}"'
    for vm in ("zen-a-1", "zen-a-2"):
        with pytest.raises(NotFound):
            made.get_subscription(subscription=path(config, vm))
    assert made.get_subscription(subscription=path(config, "zen-a-3")).filter == 'attributes.vm = "zen-a-3"'


def test_the_next_function_instance_deletes_the_subscriptions_of_vms_gone_that_one_before_it_made(config, zen, made):
    """A tick's function instance replaced (a deploy, a scale-in) forgets what it made: the subscriptions of the VMs
    that left their MIGs since stayed attached to the topic a day; the next instance's first tick reads the VMs that
    left in the last day and deletes theirs."""
    assert zen.on_scale_tick().controls == 3
    zen.controls = ControlSubscriptions(config, config.project, ACCOUNTS, made)  # a new function instance
    with zen.db.transaction() as session:  # zen-a-1 and zen-a-2 were deleted
        fleet.see_instances(session, "4xa100-40gb", "us-central1", [], zen.clock())

    zen.on_scale_tick()

    for vm in ("zen-a-1", "zen-a-2"):
        with pytest.raises(NotFound):
            made.get_subscription(subscription=path(config, vm))
    assert made.get_subscription(subscription=path(config, "zen-a-3")).filter == 'attributes.vm = "zen-a-3"'


def test_a_pool_forgotten_by_an_instance_whose_configuration_lacks_it_keeps_its_vms_subscriptions(config, zen, made):
    """A function instance still running as a deploy adds a pool (its configuration lacks it) forgets that pool's VMs
    as dropped (never seen leave their MIG: they run on, and the next pass lists them again); the instance that had
    made their subscriptions took them as gone and deleted them: the orders sent meanwhile were lost (a CONFIRM, the
    claim timed out; a STOP, the job ran on)."""
    assert zen.on_scale_tick().controls == 3
    with zen.db.transaction() as session:  # the older instance's tick: its configuration has no us-west1
        fleet.forget_dropped_pools(session, {"4xa100-40gb": ("us-central1",)})

    zen.on_scale_tick()

    assert made.get_subscription(subscription=path(config, "zen-a-3")).filter == 'attributes.vm = "zen-a-3"'


def test_the_next_function_instance_keeps_the_subscriptions_of_a_pool_put_back(config, zen, made):
    """A pool dropped by one deploy and put back by the next, its MIG never destroyed: its VMs, forgotten as dropped,
    ran on; the new function instance's first tick read them as gone and deleted their subscriptions before its
    scaling step listed them again."""
    assert zen.on_scale_tick().controls == 3
    with zen.db.transaction() as session:  # the deploy without us-west1
        fleet.forget_dropped_pools(session, {"4xa100-40gb": ("us-central1",)})
    zen.controls = ControlSubscriptions(config, config.project, ACCOUNTS, made)  # the deploy that put it back

    zen.on_scale_tick()

    assert made.get_subscription(subscription=path(config, "zen-a-3")).filter == 'attributes.vm = "zen-a-3"'


def test_a_failed_read_of_the_vms_seen_leaving_deletes_none_and_still_makes_the_new_vms_subscriptions(
        config, made):
    """The read of which VMs a pass saw leave (the database's) failing raised out of ``ensure``: that tick's step
    made no subscription for the VMs that came, whose agents waited for theirs. Now none is deleted then (the next
    tick reads again) and the new ones are made."""
    controls = ControlSubscriptions(config, config.project, ACCOUNTS, made)
    fleet_now = [("zen-a-1", "4xa100-40gb", "us-central1"), ("zen-a-3", "4xa100-40gb", "us-west1")]
    assert controls.ensure(fleet_now) == 2

    def unreadable(names):
        raise ConnectionError("the database did not answer")

    assert controls.ensure([fleet_now[1], ("zen-a-4", "4xa100-40gb", "us-central1")], left=unreadable) == 1
    for vm in ("zen-a-1", "zen-a-3", "zen-a-4"):
        assert made.get_subscription(subscription=path(config, vm)).filter == f'attributes.vm = "{vm}"'
    fresh = ControlSubscriptions(config, config.project, ACCOUNTS, made)  # a new instance: its read of those gone fails
    assert fresh.ensure([("zen-a-5", "4xa100-40gb", "us-central1")], gone=lambda: unreadable([])) == 1
