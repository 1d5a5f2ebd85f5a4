"""A VM's control subscription made beforehand by someone else, with a filter that never matches (from
another VM of the project, to swallow this VM's confirms and stops): the agent checks the subscription
it finds, replaces it, and gets its CONFIRM and its STOP anyway. Real agents, real functions, the
Pub/Sub stand-in through the official clients."""

from __future__ import annotations

from google.pubsub_v1 import types as T

from tests.agent.helpers import job_command


def squat(config, pubsub_clients, vm: str, filter_: str) -> str:
    publisher, subscriber = pubsub_clients
    path = subscriber.subscription_path(config.project, config.vm_control_subscription(vm))
    subscriber.create_subscription(request=T.Subscription(
        name=path, topic=publisher.topic_path(config.project, config.topics.vm_control), filter=filter_))
    return path


def test_a_control_subscription_with_a_wrong_filter_is_replaced_and_orders_arrive(scheduler, agents,
                                                                                 pubsub_clients, tmp_path):
    path = squat(scheduler.config, pubsub_clients, "vm-a", 'attributes.vm = "nobody"')
    agent = agents.start("vm-a")
    scheduler.submit("squat-1", job_command("--pidfile", str(tmp_path / "pid"), "--sleep", "120"))

    scheduler.wait_status("squat-1", "RUNNING", timeout_s=20)  # the claim was confirmed
    scheduler.stop("squat-1", "squatted")
    job = scheduler.wait_status("squat-1", "CANCELLED", timeout_s=15)  # and the stop obeyed

    assert "stopped (squatted)" in job.message
    assert agent.said("control subscription has the wrong topic or filter; replacing it",
                      filter='attributes.vm = "nobody"')
    now = pubsub_clients[1].get_subscription(subscription=path)
    assert now.filter == 'attributes.vm = "vm-a"' and now.topic.endswith("/topics/" + scheduler.config.topics.vm_control)


def test_a_right_control_subscription_is_reused(scheduler, agents, pubsub_clients, tmp_path):
    squat(scheduler.config, pubsub_clients, "vm-a", 'attributes.vm = "vm-a"')
    agent = agents.start("vm-a")
    scheduler.submit("reuse-1", job_command("--print", "hi"))

    scheduler.wait_status("reuse-1", "SUCCEEDED", timeout_s=20)
    assert agent.said("control subscription reused", vm="vm-a")
    assert not agent.said("control subscription has the wrong topic or filter; replacing it")
