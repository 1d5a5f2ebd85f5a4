"""Start routing by data (zen.core.routing): a data job's first start message reaches only the regions near
its data; the tick widens it to every allowed region once ``data_wait_s`` passes unclaimed; a claim from
any allowed region wins; the planner's demand follows the narrowing; tagged jobs stay in their groups."""

from __future__ import annotations

import json

import pytest

from tests.messages import heartbeat, job_request
from zen.core.config import ZenConfig
from zen.store import fleet, repository

DATA = [{"uri": "gs://eu-data/shards/", "size_gb": 120}]


@pytest.fixture
def routed(config, db, publisher, clock, db_url, monkeypatch):
    """Zen with a europe-west4 bucket, a 30 s wait and us-central1 + europe-west4 of 4xa100-40gb
    cleared for hipaa; its functions under functions-framework."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    raw["data"] = {"bucket_locations": {"eu-data": "europe-west4", "us-data": "us-central1"}, "route_min_gb": 10}
    raw["deadlines"]["data_wait_s"] = 30
    for cluster in raw["clusters"]:
        if cluster["name"] == "4xa100-40gb":
            cluster["region_tags"] = {"us-central1": ["hipaa"], "europe-west4": ["hipaa"]}
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def reach(message) -> set[str]:
    return {key for key in message.attributes if key.startswith("allow_")}


def history(zen, job_id) -> list[tuple[str | None, str, str]]:
    with zen.db.transaction() as session:
        return [(h["from_status"], h["to_status"], h["reason"]) for h in repository.job_history(session, job_id)]


def get(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def test_a_data_jobs_first_start_reaches_its_data_region_and_the_tick_widens_it(routed, publisher, clock):
    zen, functions = routed
    functions.submit(job_request("d1", inputs=DATA))
    [first] = publisher.on("zen-job-start")
    assert reach(first) == {"allow_europe_west4"} and first.attributes["regions"] == "europe-west4"
    assert json.loads(first.data)["regions"] == ["europe-west4", "us-central1", "us-west1"]  # allowed: all
    assert history(zen, "d1")[-1] == ("PENDING", "QUEUED", "admitted; start sent to europe-west4 first, where its "
                                      "data is; widened after 30 s unclaimed")

    clock.advance(29)
    functions.tick()
    assert len(publisher.on("zen-job-start")) == 1  # not yet: the wait is not over

    clock.advance(31)  # the next tick, a minute after the start went out
    functions.tick()
    [_, widened] = publisher.on("zen-job-start")
    assert reach(widened) == {"allow_europe_west4", "allow_us_central1", "allow_us_west1"}  # every allowed region
    assert history(zen, "d1")[-1] == ("QUEUED", "QUEUED", "start widened to every allowed region: unclaimed 60 s "
                                      "in europe-west4")
    job = get(zen, "d1")
    assert job.status.value == "QUEUED" and job.start_regions is None and job.widen_at is None
    clock.advance(120)
    functions.tick()
    assert len(publisher.on("zen-job-start")) == 2  # widened once, not again


def test_after_widening_a_claim_from_another_region_wins_and_the_narrow_copy_is_released(routed, publisher, clock):
    zen, functions = routed
    functions.submit(job_request("d2", inputs=DATA))
    clock.advance(45)
    functions.tick()
    functions.heartbeat(heartbeat("d2", "CLAIMED", 1, vm="vm-us", region="us-central1"))
    functions.heartbeat(heartbeat("d2", "CLAIMED", 1, vm="vm-eu", region="europe-west4",
                                  zone="europe-west4-a"))  # the narrow copy, still in europe-west4's subscription
    # Redelivered: changes nothing, and is answered the same again (it may be vm-us claiming again).
    functions.heartbeat(heartbeat("d2", "CLAIMED", 1, vm="vm-us", region="us-central1"))
    controls = [(json.loads(m.data)["vm"], json.loads(m.data)["action"]) for m in publisher.on("zen-vm-control")]
    assert controls == [("vm-us", "CONFIRM"), ("vm-eu", "RELEASE"), ("vm-us", "CONFIRM")]
    job = get(zen, "d2")
    assert job.status.value == "ASSIGNED" and job.vm == "vm-us" and job.region == "us-central1"


def test_a_claim_from_an_allowed_region_counts_even_while_narrowed(routed, publisher):
    zen, functions = routed
    functions.submit(job_request("d3", inputs=DATA))
    functions.heartbeat(heartbeat("d3", "CLAIMED", 1, vm="vm-west", region="us-west1", zone="us-west1-a"))
    assert get(zen, "d3").vm == "vm-west"  # narrowing routes the message; the claim check is the allowed regions


def test_the_planners_demand_follows_the_narrowing(routed, clock):
    zen, functions = routed
    functions.submit(job_request("d4", inputs=DATA))
    functions.submit(job_request("plain"))
    with zen.db.transaction() as session:
        demand = sorted((tuple(r["regions"]), r["jobs"]) for r in fleet.queued_demand(session, "4xa100-40gb", clock(), 600))
    assert demand == [(("europe-west4",), 1), (("us-central1", "us-west1", "europe-west4"), 1)]
    clock.advance(60)
    functions.tick()
    with zen.db.transaction() as session:
        demand = sorted((tuple(r["regions"]), r["jobs"]) for r in fleet.queued_demand(session, "4xa100-40gb", clock(), 600))
    assert demand == [(("europe-west4", "us-central1", "us-west1"), 1), (("us-central1", "us-west1", "europe-west4"), 1)]


@pytest.mark.parametrize("inputs, wait", [
    ([{"uri": "gs://eu-data/small", "size_gb": 2}], 30),  # below route_min_gb
    ([{"uri": "gs://eu-data/unsized"}], 30),  # weighs 1 GB
    ([{"uri": "gs://unknown-bucket/x", "size_gb": 500}], 30),  # no known location (no stand-in here)
    (DATA, 0),  # data_wait_s 0: routing off
])
def test_a_start_is_not_narrowed_when_routing_would_not_pay(routed, publisher, db, clock, inputs, wait, monkeypatch):
    from zen.core import locality
    from zen.app import Zen

    zen, _ = routed
    monkeypatch.setitem(locality._looked_up, "unknown-bucket", None)  # as if looked up and not found
    config = zen.config.model_copy(update={"deadlines": zen.config.deadlines.model_copy(update={"data_wait_s": wait})})
    Zen(config, db, publisher, clock).jobs.submit(_envelope(job_request("s1", inputs=inputs)))
    [start] = publisher.on("zen-job-start")
    assert reach(start) >= {"allow_europe_west4", "allow_us_central1", "allow_us_west1"}
    assert get(zen, "s1").widen_at is None


def test_a_tagged_data_job_stays_in_its_cleared_regions_when_narrowed_and_widened(routed, publisher, clock):
    zen, functions = routed
    functions.submit(job_request("phi-d", inputs=DATA, requires_tags=["hipaa"]))
    clock.advance(60)
    functions.tick()
    first, widened = publisher.on("zen-job-start")
    assert reach(first) == {"allow_europe_west4"}
    assert reach(widened) == {"allow_europe_west4", "allow_us_central1"}  # never us-west1, never allow_any


def test_a_requeued_attempt_is_narrowed_again(routed, publisher, clock):
    zen, functions = routed
    functions.submit(job_request("d5", inputs=DATA))
    clock.advance(60)
    functions.tick()  # widened
    functions.heartbeat(heartbeat("d5", "CLAIMED", 1, vm="vm-us", region="us-central1"))
    clock.advance(600)
    functions.tick()  # the VM went silent: LOST, requeued as attempt 2
    starts = publisher.on("zen-job-start")
    assert [s.attributes["attempt"] for s in starts] == ["1", "1", "2"]
    assert reach(starts[-1]) == {"allow_europe_west4"}
    assert history(zen, "d5")[-1][2] == ("requeued as attempt 2; start sent to europe-west4 first, where its data "
                                         "is; widened after 30 s unclaimed")


def _envelope(payload: dict):
    from zen.core.events import PubSubEnvelope

    return PubSubEnvelope(message_id="m-1", data=json.dumps(payload).encode())


def test_a_start_is_not_narrowed_to_a_region_a_stockout_blocks(routed, publisher, clock):
    from datetime import timedelta

    zen, functions = routed
    until = (clock() + timedelta(minutes=3)).isoformat()
    with zen.db.transaction() as session:
        fleet.save_scaling_memory(session, "4xa100-40gb", "europe-west4", json.dumps({"blocked_until": until}),
                                  clock())
    functions.submit(job_request("d6", inputs=DATA))
    [start] = publisher.on("zen-job-start")
    assert reach(start) == {"allow_europe_west4", "allow_us_central1", "allow_us_west1"}  # it would only wait there
    assert get(zen, "d6").start_regions is None


def vm_heartbeat(vm: str, region: str, seq: int, **fields) -> dict:
    from datetime import datetime, timezone

    return {"kind": "vm", "vm": vm, "cluster": "4xa100-40gb", "region": region, "zone": f"{region}-a",
            "state": "IDLE", "seq": seq, "sent_at": datetime.now(timezone.utc).isoformat(), **fields}


def offers(publisher) -> list[tuple[str, str, str]]:
    """The starts offered to single VMs on zen-vm-control: (vm, job_id, attempt)."""
    return [(m.attributes["vm"], json.loads(m.data)["job_id"], m.attributes["attempt"])
            for m in publisher.on("zen-vm-control") if m.attributes.get("kind") == "start"]


def test_a_job_is_offered_first_to_an_idle_vm_holding_its_inputs_then_its_region_and_data_then_everywhere(
        routed, publisher, clock):
    zen, functions = routed
    functions.heartbeat(vm_heartbeat("vm-warm", "us-west1", 1, cached_inputs=["gs://eu-data/shards/"]))
    functions.heartbeat(vm_heartbeat("vm-cold", "us-central1", 1, cached_inputs=["gs://eu-data/other"]))
    with zen.db.transaction() as session:
        stored = {v["name"]: v["cached_inputs"] for v in repository.list_vms(session)}
    assert stored == {"vm-warm": ["gs://eu-data/shards/"], "vm-cold": ["gs://eu-data/other"]}

    functions.submit(job_request("w1", inputs=DATA))
    assert offers(publisher) == [("vm-warm", "w1", "1")] and publisher.on("zen-job-start") == []
    clock.advance(60)
    functions.tick()
    clock.advance(60)
    functions.tick()

    assert [reach(s) for s in publisher.on("zen-job-start")] == [
        {"allow_us_west1", "allow_europe_west4"}, {"allow_us_west1", "allow_europe_west4", "allow_us_central1"}]
    notes = [reason for _, _, reason in history(zen, "w1")[-3:]]
    assert notes == ["admitted; start offered to VM vm-warm in us-west1 first, whose warm cache holds its inputs; "
                     "widened after 30 s unclaimed",
                     "start widened to europe-west4, us-west1, where its warm VMs and its data are: unclaimed 60 s "
                     "on VM vm-warm",
                     "start widened to every allowed region: unclaimed 60 s in europe-west4, us-west1"]


def test_only_an_idle_vm_holding_every_input_counts_and_a_busy_one_does_not(routed, publisher):
    zen, functions = routed
    functions.heartbeat(vm_heartbeat("vm-part", "us-west1", 1, cached_inputs=["gs://eu-data/shards/"]))
    functions.heartbeat(vm_heartbeat("vm-busy", "us-central1", 1, state="BUSY", job_id="other", attempt=1,
                                     cached_inputs=["gs://eu-data/shards/", "gs://eu-data/vocab"]))
    functions.submit(job_request("w2", inputs=DATA + [{"uri": "gs://eu-data/vocab"}]))
    [start] = publisher.on("zen-job-start")
    assert reach(start) == {"allow_europe_west4"}  # its data's region, as without caches


def test_an_idle_vm_that_ran_the_image_by_digest_draws_the_job(routed, publisher):
    image = "us-docker.pkg.dev/p/r/train@sha256:" + "b" * 64
    zen, functions = routed
    functions.heartbeat(vm_heartbeat("vm-img", "us-central1", 1, images=[image, "busybox:latest"]))
    functions.submit(job_request("i1", image=image))
    functions.submit(job_request("i2", image="busybox:latest"))  # a tag may move: not matched
    assert offers(publisher) == [("vm-img", "i1", "1")]
    assert history(zen, "i1")[-1][2].startswith("admitted; start offered to VM vm-img in us-central1 first, which "
                                                "ran its image")
    [start] = publisher.on("zen-job-start")
    assert json.loads(start.data)["job_id"] == "i2" and start.attributes["allow_any"] == "1"


def test_zen_explain_says_where_a_narrowed_start_goes_and_until_when(routed, tmp_path, monkeypatch, capsys):
    import yaml

    from zen.cli.queues import explain_job, local_time

    zen, functions = routed
    functions.submit(job_request("d7", inputs=DATA))
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(zen.config.model_dump_json())))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    assert explain_job("d7", False, zen.db) == 0
    widen_at = get(zen, "d7").widen_at
    assert (f"d7: QUEUED - admitted; waiting for a VM of 4xa100-40gb in europe-west4 (its start goes there first; "
            f"to every allowed region at the first tick after {local_time(widen_at)})") in capsys.readouterr().out


def test_a_warm_vm_not_heard_from_lately_draws_nothing(routed, publisher, clock):
    """A VM that died without saying so leaves its row; its cache must not narrow later jobs to its
    region: only VMs heard from within fleet.WARM_VM_SEEN_S count."""
    zen, functions = routed
    functions.heartbeat(vm_heartbeat("vm-gone", "us-west1", 1, cached_inputs=["gs://eu-data/shards/"]))
    clock.advance(fleet.WARM_VM_SEEN_S + 1)
    functions.submit(job_request("w3", inputs=DATA))
    [start] = publisher.on("zen-job-start")
    assert reach(start) == {"allow_europe_west4"}  # its data's region, as without caches


def test_room_on_a_busy_vm_absorbs_only_narrowed_jobs_its_region_reaches(routed, clock):
    """Several jobs per VM meet routing: a data job narrowed to europe-west4 is not
    absorbed by room on a busy VM in us-central1; the demand the planner sees stays in europe-west4."""
    from datetime import datetime, timezone

    from zen.scaling.model import Vm, VmPhase
    from zen.scaling.sharing import absorb

    zen, functions = routed
    functions.submit(job_request("d1", inputs=DATA))
    with zen.db.transaction() as session:
        rows = fleet.queued_demand_by_gpus(session, "4xa100-40gb", clock(), 600)
    busy = [Vm("vm-us", "us-central1", VmPhase.BUSY, datetime.now(timezone.utc), job_id="other")]
    [left] = absorb(rows, {"vm-us": (1, 2)}, busy, 4, 2)
    assert (left.regions, left.count) == (("europe-west4",), 1)


def test_a_data_start_that_skipped_a_blocked_near_region_widens_to_every_region_next(routed, publisher, clock, db):
    """Its data in the US multi-region (us-central1 and us-west1 near), us-west1 blocked by a stockout:
    the start went to us-central1 first, as documented, but the widening narrowed it to the blocked
    region too for another data_wait_s before every region (twice the documented wait)."""
    from datetime import timedelta

    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen, _ = routed
    raw = json.loads(zen.config.model_dump_json())
    raw["data"]["bucket_locations"]["us-multi"] = "US"
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    functions = FunctionsInvoker(zen)
    with zen.db.transaction() as session:
        fleet.save_scaling_memory(session, "4xa100-40gb", "us-west1", json.dumps(
            {"blocked_until": (clock() + timedelta(minutes=15)).isoformat()}), clock())
    functions.submit(job_request("b1", inputs=[{"uri": "gs://us-multi/shards/", "size_gb": 120}]))
    for _ in range(2):
        clock.advance(60)
        functions.tick()
    reaches = [reach(m) for m in publisher.on("zen-job-start")]
    assert reaches[0] == {"allow_us_central1"} and "allow_any" in reaches[1]

