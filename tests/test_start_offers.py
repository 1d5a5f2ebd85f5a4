"""Warm caches per VM (zen.core.routing): a job whose inputs an idle VM's cache holds is offered first to
that VM alone, on its control subscription (zen-vm-control, vm=<name>, kind=start), not to the
region's start subscription where any idle VM could take it; the tick widens it to the region, then
everywhere; a republish keeps the offer; a VM is offered one start at a time."""

from __future__ import annotations

import json
from datetime import timedelta

from tests.messages import heartbeat, job_request
from tests.test_routing import DATA, get, history, offers, reach, routed, vm_heartbeat  # noqa: F401 (fixture)
from zen.store import fleet


def two_idle_vms_one_warm(functions) -> None:
    functions.heartbeat(vm_heartbeat("vm-cold", "us-west1", 1, cached_inputs=["gs://eu-data/other"]))
    functions.heartbeat(vm_heartbeat("vm-warm", "us-west1", 1, cached_inputs=["gs://eu-data/shards/"]))


def test_the_start_goes_only_to_the_warm_vm_then_its_region_then_everywhere(routed, publisher, clock):
    zen, functions = routed
    two_idle_vms_one_warm(functions)
    functions.submit(job_request("o1", inputs=DATA))

    [offer] = publisher.on("zen-vm-control")
    assert offer.attributes == {"vm": "vm-warm", "kind": "start", "job_id": "o1", "attempt": "1",
                                "cluster": "4xa100-40gb"}
    assert json.loads(offer.data)["job_id"] == "o1" and json.loads(offer.data)["inputs"] == DATA
    assert publisher.on("zen-job-start") == []  # vm-cold, as idle in the same region, is not sent it
    job = get(zen, "o1")
    assert (job.start_vms, job.start_regions) == (["vm-warm"], ["us-west1"])
    assert job.widen_at == clock() + timedelta(seconds=30)
    with zen.db.transaction() as session:  # the planner counts it where the warm VM is, and nowhere else
        assert [tuple(r["regions"]) for r in fleet.queued_demand(session, "4xa100-40gb", clock(), 600)] == [("us-west1",)]

    clock.advance(60)
    functions.tick()
    [regional] = publisher.on("zen-job-start")
    assert reach(regional) == {"allow_us_west1", "allow_europe_west4"}  # its warm VM's region and its data's
    job = get(zen, "o1")
    assert (job.start_vms, job.start_regions) == (None, ["europe-west4", "us-west1"])
    clock.advance(60)
    functions.tick()
    assert reach(publisher.on("zen-job-start")[-1]) == {"allow_us_west1", "allow_europe_west4", "allow_us_central1"}
    assert len(offers(publisher)) == 1  # offered once; the widened starts went out on zen-job-start
    assert [reason for _, _, reason in history(zen, "o1")[-3:]] == [
        "admitted; start offered to VM vm-warm in us-west1 first, whose warm cache holds its inputs; widened after "
        "30 s unclaimed",
        "start widened to europe-west4, us-west1, where its warm VMs and its data are: unclaimed 60 s on VM vm-warm",
        "start widened to every allowed region: unclaimed 60 s in europe-west4, us-west1"]


def test_an_offer_a_busy_warm_vm_dropped_is_widened_to_another_vm_of_its_region(routed, publisher, clock):
    """vm-warm was idle when last heard from, but took another job meanwhile: its agent drops the offer
    (zen.agent.slots.ControlRouter). Nothing is lost: the tick widens the start to the region's start
    subscription, where vm-cold takes it."""
    zen, functions = routed
    two_idle_vms_one_warm(functions)
    functions.submit(job_request("o2", inputs=DATA))
    assert offers(publisher) == [("vm-warm", "o2", "1")]
    clock.advance(60)
    functions.tick()
    [regional] = publisher.on("zen-job-start")
    assert "allow_us_west1" in reach(regional)
    functions.heartbeat(heartbeat("o2", "CLAIMED", 1, vm="vm-cold", region="us-west1", zone="us-west1-a"))
    controls = [(json.loads(m.data)["vm"], json.loads(m.data)["action"]) for m in publisher.on("zen-vm-control")
                if m.attributes.get("kind") != "start"]
    assert controls == [("vm-cold", "CONFIRM")]
    job = get(zen, "o2")
    assert (job.status.value, job.vm, job.start_vms) == ("ASSIGNED", "vm-cold", None)


def test_a_republished_start_is_offered_again_to_the_same_vm_and_a_new_attempt_is_routed_afresh(
        routed, publisher, clock, db):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen, _ = routed
    deadlines = zen.config.deadlines.model_copy(update={"data_wait_s": 300, "start_republish_s": 60})
    zen = Zen(zen.config.model_copy(update={"deadlines": deadlines}), db, publisher, clock)
    functions = FunctionsInvoker(zen)
    two_idle_vms_one_warm(functions)
    functions.submit(job_request("o3", inputs=DATA))
    clock.advance(61)
    functions.tick()  # unclaimed for start_republish_s: published again, to the same VM
    assert offers(publisher) == [("vm-warm", "o3", "1")] * 2 and publisher.on("zen-job-start") == []
    assert get(zen, "o3").start_vms == ["vm-warm"]

    functions.heartbeat(heartbeat("o3", "CLAIMED", 1, vm="vm-warm", region="us-west1", zone="us-west1-a"))
    functions.heartbeat(vm_heartbeat("vm-warm", "us-west1", 2, state="BUSY", job_id="o3", attempt=1,
                                     cached_inputs=["gs://eu-data/shards/"]))
    functions.heartbeat(vm_heartbeat("vm-cold", "us-west1", 2, cached_inputs=["gs://eu-data/shards/"]))
    clock.advance(600)
    functions.heartbeat(vm_heartbeat("vm-cold", "us-west1", 3, cached_inputs=["gs://eu-data/shards/"]))
    functions.tick()  # vm-warm went silent: LOST, requeued as attempt 2, offered to the VM warm now
    assert offers(publisher)[-1] == ("vm-cold", "o3", "2")
    assert history(zen, "o3")[-1][2].startswith("requeued as attempt 2; start offered to VM vm-cold in us-west1 first")


def test_a_vm_is_offered_one_start_at_a_time_and_a_burst_goes_to_its_region(routed, publisher, clock):
    zen, functions = routed
    two_idle_vms_one_warm(functions)
    functions.submit(job_request("b1", inputs=DATA))
    functions.submit(job_request("b2", inputs=DATA))
    assert offers(publisher) == [("vm-warm", "b1", "1")]
    [start] = publisher.on("zen-job-start")
    assert json.loads(start.data)["job_id"] == "b2" and reach(start) == {"allow_us_west1"}
    assert history(zen, "b2")[-1][2] == ("admitted; start sent to us-west1 first, whose idle VMs hold its inputs; "
                                         "widened after 30 s unclaimed")

    functions.heartbeat(heartbeat("b1", "CLAIMED", 1, vm="vm-warm", region="us-west1", zone="us-west1-a"))
    functions.submit(job_request("b3", inputs=DATA))  # vm-warm holds b1, its row still IDLE: not warm and idle
    assert offers(publisher) == [("vm-warm", "b1", "1")]
    assert history(zen, "b3")[-1][2].startswith("admitted; start sent to europe-west4 first, where its data is")


def test_zen_explain_says_a_start_is_offered_to_a_warm_vm(routed, tmp_path, monkeypatch, capsys):
    import yaml

    from zen.cli.queues import explain_job, local_time

    zen, functions = routed
    two_idle_vms_one_warm(functions)
    functions.submit(job_request("o4", inputs=DATA))
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(zen.config.model_dump_json())))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    assert explain_job("o4", False, zen.db) == 0
    assert (f"o4: QUEUED - admitted; waiting for a VM of 4xa100-40gb in us-west1 (its start is offered to vm-warm "
            f"first, whose caches are warm; widened at the first tick after {local_time(get(zen, 'o4').widen_at)})"
            ) in capsys.readouterr().out


def test_a_vm_being_scaled_down_is_offered_nothing(routed, publisher, clock):
    """Review finding: a drained VM refuses every claim until it is gone; offering it a job only made
    the job wait for the widening while the region's other idle VM could have taken it."""
    zen, functions = routed
    two_idle_vms_one_warm(functions)
    with zen.db.transaction() as session:
        fleet.drain_unless_busy(session, "vm-warm", "4xa100-40gb", "us-west1", clock())
    functions.submit(job_request("dr1", inputs=DATA))
    assert offers(publisher) == []
    assert get(zen, "dr1").start_vms is None


def test_a_refused_claim_from_an_offered_vm_widens_the_start_at_once(routed, publisher, clock):
    """Review finding: a claim refused (here: the VM was drained after the offer went out) published
    the start again to the same VM, which refused again, until it was gone; the job waited for the
    tick while another VM of the region sat idle. Now the refusal widens the start as the tick would."""
    zen, functions = routed
    two_idle_vms_one_warm(functions)
    functions.submit(job_request("dr2", inputs=DATA))
    assert len(offers(publisher)) == 1
    with zen.db.transaction() as session:
        fleet.drain_unless_busy(session, "vm-warm", "4xa100-40gb", "us-west1", clock())
    functions.heartbeat(heartbeat("dr2", "CLAIMED", 1, vm="vm-warm", region="us-west1", zone="us-west1-a"))
    assert len(offers(publisher)) == 1  # not offered to vm-warm again
    [regional] = publisher.on("zen-job-start")
    assert reach(regional) == {"allow_us_west1", "allow_europe_west4"}
    job = get(zen, "dr2")
    assert job.status.value == "QUEUED" and job.start_vms is None and job.start_regions == ["europe-west4", "us-west1"]
    assert "its claim refused: VM vm-warm is being scaled down" in history(zen, "dr2")[-1][2]
    functions.heartbeat(heartbeat("dr2", "CLAIMED", 1, vm="vm-cold", region="us-west1", zone="us-west1-a"))
    assert get(zen, "dr2").vm == "vm-cold"


def test_a_start_with_offered_vms_but_no_widening_due_goes_to_the_start_subscriptions(routed):
    """An offer is dropped by a VM that cannot take it, trusting the widening: a job row with offered
    VMs and no widening due (written by a function older than offers, during a rollout) is never
    offered, or it could be offered to a dead VM forever."""
    from zen.jobs.announce import Announcements

    zen, functions = routed
    functions.submit(job_request("nw1"))
    job = get(zen, "nw1").model_copy(update={"start_vms": ["vm-gone"], "start_regions": ["us-west1"],
                                             "widen_at": None})
    [message] = Announcements(zen.config).start(job)
    assert message.topic == "zen-job-start" and message.attributes["allow_us_west1"] == "1"
