"""Accounting: every attempt a VM claimed leaves one ``attempt_usage`` row when it ends (succeeded,
failed, stopped, lost, preempted), written with the change that ends it, counted once however often
the end is delivered; ``zen usage`` sums them per user, queue or region with what they cost."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.messages import agent_run, heartbeat, job_request
from tests.test_queues import RECLAIM, borrow_all_and_reclaim, queued_zen, stop_answer  # noqa: F401 (fixture)
from zen.cli import main as cli
from zen.cli.usage import Pricer, summarise
from zen.core.prices import Price, PriceTable
from zen.store import repository, usage

CLUSTER = "4xa100-40gb"  # a2-highgpu-4g: 4 GPUs per VM
PRICE = 14.69354  # the snapshot's price of an a2-highgpu-4g per VM-hour in us-central1 and us-west1, standard
L4_EUROPE = 0.897202  # the snapshot's g2-standard-8 in europe-west4, standard
SPOT = 5.17342  # the snapshot's a2-highgpu-4g in us-central1, spot


def attempts(zen, job_id):
    with zen.db.transaction() as session:
        return usage.attempts_of_job(session, job_id)


def zen_usage(capsys, *args) -> dict:
    assert cli.main(["usage", "--since", "2025-12-01", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_succeeded_job_records_its_attempt_from_the_claim_to_the_end(functions, zen, clock):
    functions.submit(job_request("job-1"))
    clock.advance(10)
    claimed, running, *_, done = agent_run("job-1", vm="vm-a")
    functions.heartbeat(claimed)
    clock.advance(20)
    functions.heartbeat(running)
    clock.advance(3600)
    functions.heartbeat(done)

    [row] = attempts(zen, "job-1")
    assert (row["attempt"], row["user_id"], row["queue"], row["cluster"], row["machine_type"], row["region"],
            row["vm"], row["gpus"], row["outcome"]) == (
        1, "alice", None, CLUSTER, "a2-highgpu-4g", "us-central1", "vm-a", 4, "SUCCEEDED")
    assert (row["ended_at"] - row["started_at"]).total_seconds() == 3620  # held by vm-a from its claim
    assert row["gpu_seconds"] == 4 * 3620


def test_a_lost_attempt_and_its_retry_are_both_counted_and_a_redelivered_end_counts_once(
        functions, zen, clock, capsys):
    functions.submit(job_request("job-1"))
    clock.advance(10)
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a"))
    clock.advance(zen.config.deadlines.heartbeat_timeout_s + 30)  # vm-a goes silent: lost at the sweep
    functions.tick()
    assert [r["outcome"] for r in attempts(zen, "job-1")] == ["LOST"]
    functions.heartbeat(heartbeat("job-1", "RUNNING", 3, vm="vm-a"))  # vm-a's late report of attempt 1

    beats = agent_run("job-1", attempt=2, vm="vm-b")
    for beat in beats:
        beat.update(region="us-west1", zone="us-west1-a")
    functions.heartbeat(beats[0])
    clock.advance(1800)
    for beat in beats[1:]:
        functions.heartbeat(beat)
    functions.heartbeat(beats[-1])  # the end, redelivered
    functions.heartbeat(beats[-1], message_id="again")  # and published twice

    lost, retried = attempts(zen, "job-1")
    assert (lost["attempt"], lost["vm"], lost["region"], lost["outcome"]) == (1, "vm-a", "us-central1", "LOST")
    assert (lost["ended_at"] - lost["started_at"]).total_seconds() == 150  # until the sweep gave it up
    assert (retried["attempt"], retried["vm"], retried["region"], retried["outcome"]) == (
        2, "vm-b", "us-west1", "SUCCEEDED")
    assert retried["gpu_seconds"] == 4 * 1800

    report = zen_usage(capsys)
    assert report["by"] == "user" and report["unpriced"] == []
    [alice] = report["groups"]
    vm_hours = (150 + 1800) / 3600
    assert alice == {"user": "alice", "jobs": 1, "attempts": 2, "gpu_hours": round(4 * vm_hours, 3),
                     "vm_hours": round(vm_hours, 3), "usd": round(vm_hours * PRICE, 2)}
    assert report["total"] == {k: v for k, v in alice.items() if k != "user"}
    regions = {g["region"]: (g["jobs"], g["attempts"], g["vm_hours"]) for g in zen_usage(capsys, "--by", "region")["groups"]}
    assert regions == {"us-central1": (1, 1, round(150 / 3600, 3)), "us-west1": (1, 1, 0.5)}
    assert [g["queue"] for g in zen_usage(capsys, "--by", "queue")["groups"]] == ["(none)"]
    # The table: one row per user and the total.
    assert cli.main(["usage", "--since", "2025-12-01"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split() == ["USER", "JOBS", "ATTEMPTS", "GPU_HOURS", "VM_HOURS", "USD"]
    assert table[2].split()[:3] == ["alice", "1", "2"] and table[3].split()[0] == "TOTAL"


def test_the_insert_itself_counts_an_attempt_once(functions, zen, clock):
    functions.submit(job_request("job-1"))
    for beat in agent_run("job-1"):
        functions.heartbeat(beat)
    with zen.db.transaction() as session:
        job = repository.get_job(session, "job-1")
        again = usage.record_attempt(session, job, outcome="SUCCEEDED", machine_type="a2-highgpu-4g",
                                     gpus=4, ran_from=job.started_at, now=clock.advance(999))
    assert again is False and len(attempts(zen, "job-1")) == 1


def test_stopped_attempts_count_and_attempts_no_vm_claimed_do_not(functions, zen, clock):
    functions.submit(job_request("running"))
    functions.submit(job_request("queued"))
    functions.heartbeat(heartbeat("running", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("running", "RUNNING", 2, vm="vm-a"))
    clock.advance(60)
    functions.stop({"job_id": "running"})
    functions.stop({"job_id": "queued"})
    clock.advance(5)
    functions.heartbeat(heartbeat("running", "STOPPED", 3, vm="vm-a", exit_code=-15))
    [row] = attempts(zen, "running")
    assert row["outcome"] == "STOPPED" and row["gpu_seconds"] == 4 * 65
    assert attempts(zen, "queued") == []


def test_a_failed_run_and_a_cloud_preempted_vm_are_counted(functions, zen, clock):
    functions.submit(job_request("fails"))
    for beat in agent_run("fails", final="FAILED", exit_code=3):
        functions.heartbeat(beat)
    functions.submit(job_request("spot"))
    functions.heartbeat(heartbeat("spot", "CLAIMED", 1, vm="vm-s"))
    clock.advance(30)
    functions.heartbeat(heartbeat("spot", "PREEMPTED", 2, vm="vm-s"))
    assert [r["outcome"] for r in attempts(zen, "fails")] == ["FAILED"]
    [spot] = attempts(zen, "spot")
    assert (spot["outcome"], spot["gpu_seconds"]) == ("LOST", 4 * 30)


@pytest.mark.queues(RECLAIM)
def test_an_attempt_preempted_by_admission_is_counted_under_its_queue(queued_zen, clock, capsys):
    zen, functions = queued_zen
    borrow_all_and_reclaim(functions, clock)  # a0..a3 of team-a run; b1 reclaims: a3 is stopped
    clock.advance(40)
    functions.heartbeat(stop_answer("a3", "vm-3"))
    [row] = attempts(zen, "a3")
    assert (row["outcome"], row["queue"], row["attempt"]) == ("PREEMPTED", "team-a", 1)
    [team_a] = zen_usage(capsys, "--by", "queue")["groups"]
    assert (team_a["queue"], team_a["jobs"], team_a["attempts"]) == ("team-a", 1, 1)


def test_by_region_adds_the_fleets_vm_hours_boot_and_idle_included(functions, zen, clock, capsys):
    from zen.store import fleet

    start = clock()
    with zen.db.transaction() as session:  # what the scaling passes record of the MIGs
        fleet.see_instances(session, CLUSTER, "us-central1", ["vm-a", "vm-gone"], start)
        fleet.see_instances(session, "1xl4", "europe-west4", ["vm-idle"], start)
        # A secondary pool's instances count in its region; a flex-start request's pending VMs not at all.
        fleet.see_instances(session, CLUSTER, "us-central1/standard", ["vm-b", "zen-x+zen-req+0"], start)
        fleet.see_instances(session, CLUSTER, "us-central1", ["vm-a", "vm-gone"], clock.advance(1800))
    functions.submit(job_request("job-1"))
    for beat in agent_run("job-1", vm="vm-a"):
        functions.heartbeat(beat)
        clock.advance(300)
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, "us-central1", ["vm-a"], start + timedelta(hours=1))  # vm-gone left
        fleet.see_instances(session, "1xl4", "europe-west4", ["vm-idle"], start + timedelta(hours=1))
        fleet.see_instances(session, CLUSTER, "us-central1/standard", ["vm-b", "zen-x+zen-req+0"], start + timedelta(hours=1))

    report = zen_usage(capsys, "--by", "region")
    europe, central = report["groups"]  # by region name
    assert (central["region"], central["jobs"], central["vm_hours"]) == ("us-central1", 1, 0.25)  # claim to end
    assert (central["fleet_vm_hours"], central["fleet_usd"]) == (2.5, round(2.5 * PRICE, 2))  # vm-a, vm-b 1h, vm-gone 0.5h
    assert europe == {"region": "europe-west4", "jobs": 0, "attempts": 0, "gpu_hours": 0.0, "vm_hours": 0.0,
                      "usd": 0.0, "fleet_vm_hours": 1.0, "fleet_usd": round(L4_EUROPE, 2)}
    assert (report["total"]["fleet_vm_hours"], report["total"]["fleet_usd"]) == (3.5, round(2.5 * PRICE + L4_EUROPE, 2))
    assert cli.main(["usage", "--since", "2025-12-01", "--by", "region"]) == 0
    assert "FLEET_VM_HOURS" in capsys.readouterr().out


def test_the_fleets_one_minute_minimum_is_billed_once_in_the_window_where_the_vm_began(functions, zen, clock, capsys):
    """A VM one scaling pass alone saw RUNNING (a race's loser, deleted at once) was billed GCE's minute, not
    nothing; a VM running for 10 h, 6 s of it in the window, costs those 6 s (its minute was paid before)."""
    from zen.store import fleet

    start = clock()
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, "us-central1", ["vm-brief", "vm-long"], start)
        fleet.see_instances(session, CLUSTER, "us-central1", ["vm-long"], start + timedelta(seconds=60))
        fleet.see_instances(session, CLUSTER, "us-central1", ["vm-long"], start + timedelta(hours=10, seconds=6))
    [central] = zen_usage(capsys, "--by", "region")["groups"]
    assert central["fleet_usd"] == round((60 + 10 * 3600 + 6) * PRICE / 3600, 2)
    window = (start + timedelta(hours=10)).isoformat()
    assert cli.main(["usage", "--since", window, "--by", "region", "--json"]) == 0
    [central] = json.loads(capsys.readouterr().out)["groups"]
    assert (central["fleet_vm_hours"], central["fleet_usd"]) == (round(6 / 3600, 3), round(6 * PRICE / 3600, 2))


def test_a_vm_its_mig_recreates_under_the_same_name_is_billed_for_each_vm_not_the_time_between(
        functions, zen, clock, capsys):
    """A spot VM preempted after an hour is recreated by its MIG under the same name, which waits through a
    stockout for three hours listed without a VM, then runs 30 s and leaves the MIG. GCE bills the first VM's
    hour and the second's minute (its own minimum), not the four hours from the first RUNNING to the last
    sight; a window that begins in the stockout holds the second VM alone."""
    from zen.store import fleet

    start, name = clock(), "vm-spot"

    def seen(at_s: float, billed: bool) -> None:
        with zen.db.transaction() as session:
            fleet.see_instances(session, CLUSTER, "us-central1", [name], start + timedelta(seconds=at_s),
                                billed=[name] if billed else [])

    seen(0, True)
    seen(3600, True)  # the last pass to see the first VM
    seen(3630, False)  # preempted: TERMINATED, recreated, no capacity
    seen(3 * 3600, False)
    seen(4 * 3600, True)  # the second VM RUNNING
    seen(4 * 3600 + 30, True)
    with zen.db.transaction() as session:  # it left its MIG: vm_lifetimes keeps both VMs
        fleet.see_instances(session, CLUSTER, "us-central1", [], start + timedelta(hours=5))
    [central] = zen_usage(capsys, "--by", "region")["groups"]
    assert (central["fleet_vm_hours"], central["fleet_usd"]) == (
        round((3600 + 30) / 3600, 3), round((3600 + 60) * PRICE / 3600, 2))
    assert cli.main(["usage", "--since", (start + timedelta(hours=2)).isoformat(), "--by", "region", "--json"]) == 0
    [central] = json.loads(capsys.readouterr().out)["groups"]
    assert central["fleet_usd"] == round(60 * PRICE / 3600, 2)


def test_the_fleets_vms_keep_the_model_their_pool_had_when_seen(functions, zen, clock, capsys):
    """A VM of the primary pool (its name carries no model) was priced at the cluster's first model configured
    today: the cluster's spot VM of an hour, seen while it listed spot first, cost the standard price once
    standard came first (14.69 for 5.17)."""
    from zen.scaling.fleetdb import FleetDb

    cluster = zen.config.cluster(CLUSTER)
    assert cluster.provisioning[0] == "standard"  # today's order
    then = FleetDb(zen.db, {CLUSTER: cluster.model_copy(update={"provisioning": ["spot", "standard"]})})
    start = clock()
    for at in (start, start + timedelta(hours=1)):
        then.see_instances(CLUSTER, {"us-central1": ["zen-4xa100-40gb-us-central1-ab12"]}, at)
    then.see_instances(CLUSTER, {"us-central1": []}, start + timedelta(hours=1, seconds=30))  # gone: vm_lifetimes
    [central] = zen_usage(capsys, "--by", "region")["groups"]
    assert central["fleet_usd"] == round(4 * 1.293355, 2)  # the snapshot's spot a2-highgpu-4g in us-central1


def _seen_as(zen, clock, models: list[str], names: list[str]) -> None:
    """The scaling passes saw ``names`` in ``CLUSTER``'s primary pool in us-central1 while it listed ``models``."""
    from zen.scaling.fleetdb import FleetDb

    then = FleetDb(zen.db, {CLUSTER: zen.config.cluster(CLUSTER).model_copy(update={"provisioning": models})})
    then.see_instances(CLUSTER, {"us-central1": names}, clock())


def test_an_attempt_is_priced_as_the_model_its_vm_was_seen_as_not_the_first_configured_at_its_end(
        functions, zen, clock):
    """A primary pool's VM names no model: an attempt on one took the cluster's first model configured when it
    ended, so a job run on a VM seen while the cluster listed spot first, ending once it listed standard alone,
    was priced at the standard price (14.69 a VM-hour for 5.17); one whose VM had left its MIG before the sweep
    gave it up likewise. A VM the passes never saw is priced as its name says, as before."""
    vm_a, vm_b = "zen-4xa100-40gb-us-central1-ab12", "zen-4xa100-40gb-us-central1-cd34"
    _seen_as(zen, clock, ["spot", "standard"], [vm_a, vm_b])
    assert zen.config.cluster(CLUSTER).provisioning == ["standard"]  # today's
    functions.submit(job_request("job-1"))
    for beat in agent_run("job-1", vm=vm_a):
        functions.heartbeat(beat)
    functions.submit(job_request("job-2"))
    functions.heartbeat(heartbeat("job-2", "CLAIMED", 1, vm=vm_b))
    functions.heartbeat(heartbeat("job-2", "RUNNING", 2, vm=vm_b))
    _seen_as(zen, clock, ["spot", "standard"], [vm_a])  # vm_b left its MIG: vm_lifetimes keeps it
    clock.advance(zen.config.deadlines.heartbeat_timeout_s + 30)
    functions.tick()
    functions.submit(job_request("job-3"))
    for beat in agent_run("job-3", vm="vm-unseen"):
        functions.heartbeat(beat)
    rows = {job_id: attempts(zen, job_id)[0] for job_id in ("job-1", "job-2", "job-3")}
    assert {job_id: (row["outcome"], row["model"], row["usd_per_hour"]) for job_id, row in rows.items()} == {
        "job-1": ("SUCCEEDED", "spot", SPOT), "job-2": ("LOST", "spot", SPOT), "job-3": ("SUCCEEDED", "standard", PRICE)}


def test_a_listing_that_names_an_instance_twice_records_it_once(zen, clock):
    """A MIG listing may repeat a name (pages that shift while read, one name in two zones): the pass
    records the instance once instead of failing its statement (ON CONFLICT cannot touch a row twice)."""
    from zen.store import fleet

    with zen.db.transaction() as session:
        first = fleet.see_instances(session, CLUSTER, "us-central1", ["vm-a", "vm-b", "vm-a"], clock())
        again = fleet.see_instances(session, CLUSTER, "us-central1", ["vm-a", "vm-a"], clock.advance(60))
        names = [name for name, _, _ in fleet.mig_instance_names(session)]
    assert (sorted(first), list(again), sorted(names)) == (["vm-a", "vm-b"], ["vm-a"], ["vm-a"])
    assert again["vm-a"] == first["vm-a"]


def test_a_machine_type_without_a_price_is_unpriced_not_guessed():
    groups = [{"key": "alice", "jobs": 2, "attempts": 2, "gpu_seconds": 4 * 7200, "vm_seconds": 7200},
              {"key": "bob", "jobs": 1, "attempts": 1, "gpu_seconds": 3600, "vm_seconds": 3600}]
    attempts = [{"key": "alice", "cluster": "c", "machine_type": "a2-highgpu-4g", "region": "r", "vm": "vm-1",
                 "seconds": 3600, "vm_share": 1.0, "model": "standard"},
                {"key": "alice", "cluster": "c", "machine_type": "g2-standard-8", "region": "r", "vm": "vm-2",
                 "seconds": 3600, "vm_share": 1.0, "model": "standard"},
                {"key": "bob", "cluster": "c", "machine_type": "a3-highgpu-8g", "region": "r", "vm": "vm-3",
                 "seconds": 3600, "vm_share": 1.0, "model": "standard"},
                {"key": "carol", "cluster": "gone", "machine_type": "a2-highgpu-4g", "region": "r", "vm": "vm-4",
                 "seconds": 3600, "vm_share": 1.0}]  # recorded before models were: its cluster is not configured
    table = PriceTable({("a2-highgpu-4g", "r", "standard"): Price(10.0, "override"),
                        ("g2-standard-8", "r", "standard"): Price(1.0, "override")})
    pricer = Pricer(table, {})
    rows = summarise("user", groups + [{"key": "carol", "jobs": 1, "attempts": 1, "gpu_seconds": 3600,
                                        "vm_seconds": 3600}], attempts, pricer)
    assert [(r["user"], r["gpu_hours"], r["vm_hours"], r["usd"]) for r in rows] == [
        ("alice", 8.0, 2.0, 11.0), ("bob", 1.0, 1.0, None), ("carol", 1.0, 1.0, None)]
    assert pricer.unpriced == {"a3-highgpu-8g in r (standard)",
                               "a2-highgpu-4g in r (model unknown: cluster gone is not configured)"}


def test_zen_usage_refuses_a_bad_window_and_needs_a_database(no_database, capsys):
    for since in ("last tuesday", "99999999999d", "0001-01-01"):  # the last two overflowed: "zen: OverflowError"
        assert cli.main(["usage", "--since", since]) == 2
        assert "neither an age" in capsys.readouterr().err
    assert cli.main(["usage"]) == 1
    assert "no database to read" in capsys.readouterr().err


def test_zen_usage_groups_add_up_to_its_total_while_attempts_end(functions, zen, clock, capsys, monkeypatch):
    """Its statements each saw what committed before it: bob's attempt ending right after the groups were
    read gave alice alone (1 attempt) under a TOTAL of 2. The report reads one snapshot."""
    functions.submit(job_request("job-1"))  # alice's, done
    for beat in agent_run("job-1", vm="vm-a"):
        functions.heartbeat(beat)
        clock.advance(600)
    functions.submit(job_request("job-2", user_id="bob"))  # bob's, running
    for seq, status in enumerate(("CLAIMED", "RUNNING"), 1):
        functions.heartbeat(heartbeat("job-2", status, seq, vm="vm-b"))
    clock.advance(600)
    read, ended = usage.run, []

    def run(session, name, **params):
        rows = read(session, name, **params)
        if not ended:  # bob's attempt ends (its own transaction, committed) while zen usage reads
            ended.append(functions.heartbeat(heartbeat("job-2", "SUCCEEDED", 3, vm="vm-b", exit_code=0)))
        return rows

    monkeypatch.setattr(usage, "run", run)
    assert cli.main(["usage", "--since", "2025-12-01", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    groups, total = report["groups"], report["total"]
    assert ended and [(g["user"], g["attempts"]) for g in groups] == [("alice", 1)]
    assert (total["jobs"], total["attempts"]) == (1, 1)
