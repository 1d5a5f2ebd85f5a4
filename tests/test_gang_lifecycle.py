"""A gang's life through the four functions against a real Postgres (zen.core.gang): all-or-nothing
assembly in one region with ranks in claim order, the assembly deadline, one fate (first failure, a node
preempted or silent, a user's stop), and every node of an ended attempt told to stop."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import controls, job
from zen.core.gang import master_port
from zen.store import repository

WEST = dict(region="us-west1", zone="us-west1-b")


def claim(functions, vm, seq=1, attempt=1, **where):
    functions.heartbeat(heartbeat("g", "CLAIMED", seq, attempt=attempt, vm=vm, ip=f"10.0.0.{vm[-1]}", **where))


def beat(functions, vm, status, seq, attempt=1, **extra):
    functions.heartbeat(heartbeat("g", status, seq, attempt=attempt, vm=vm, **extra))


def actions(publisher, vm):
    return [c["action"] for c in controls(publisher, vm)]


def assembled(functions, zen, publisher):
    functions.submit(job_request("g", nodes=2))
    claim(functions, "vm-1")
    claim(functions, "vm-2")
    assert job(zen, "g").status.value == "ASSIGNED"


def test_nobody_runs_until_the_last_node_claims_in_the_first_nodes_region(functions, zen, publisher, config):
    functions.submit(job_request("g", nodes=2))
    starts = publisher.on("zen-job-start")
    assert len(starts) == 2 and json.loads(starts[0].data)["nodes"] == 2  # a start for each node
    claim(functions, "vm-1")
    record = job(zen, "g")
    assert (record.status.value, [n.vm for n in record.gang], record.start_regions) == (
        "QUEUED", ["vm-1"], ["us-central1"])
    assert controls(publisher) == []  # the first node waits: no CONFIRM yet
    claim(functions, "vm-1", seq=2)  # its claim repeated while it waits changes nothing
    claim(functions, "vm-3", **WEST)  # a node elsewhere cannot join: released; its copy was its region's, so the
    assert actions(publisher, "vm-3") == ["RELEASE"]  # gang's region's copy is still there: none goes out again
    assert len(publisher.on("zen-job-start")) == 2  # (tests/test_gang_stale_copies.py)
    claim(functions, "vm-2")
    record = job(zen, "g")
    assert (record.status.value, record.vm, record.region) == ("ASSIGNED", "vm-1", "us-central1")
    port = master_port(config.gangs, "g", 1)
    places = {c["vm"]: c["gang"] for c in controls(publisher) if c["action"] == "CONFIRM"}
    assert places == {"vm-1": {"rank": 0, "nodes": 2, "ips": ["10.0.0.1", "10.0.0.2"], "port": port},
                      "vm-2": {"rank": 1, "nodes": 2, "ips": ["10.0.0.1", "10.0.0.2"], "port": port}}
    claim(functions, "vm-2", seq=5)  # a node whose CONFIRM was lost claims again: told again, same place
    assert controls(publisher, "vm-2")[-1]["gang"]["rank"] == 1
    claim(functions, "vm-4")  # a copy of the start claimed after the gang is complete: released
    assert actions(publisher, "vm-4") == ["RELEASE"]


def test_the_gang_succeeds_when_every_node_succeeds(functions, zen, publisher):
    assembled(functions, zen, publisher)
    beat(functions, "vm-2", "RUNNING", 2)
    assert job(zen, "g").status.value == "RUNNING"
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-1", "SUCCEEDED", 3, exit_code=0)
    assert job(zen, "g").status.value == "RUNNING"  # one node done, the other runs on
    beat(functions, "vm-2", "SUCCEEDED", 3, exit_code=0)
    record = job(zen, "g")
    assert (record.status.value, record.exit_code) == ("SUCCEEDED", 0)
    assert [(n.status, n.exit_code) for n in record.gang] == [("SUCCEEDED", 0), ("SUCCEEDED", 0)]
    assert "STOP" not in actions(publisher, "vm-1") + actions(publisher, "vm-2")


def test_the_first_failure_ends_the_gang_and_stops_the_other_nodes(functions, zen, publisher):
    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    beat(functions, "vm-2", "FAILED", 3, exit_code=3, message="boom")
    record = job(zen, "g")  # the others stopped first: a failure may be a preempted peer's (test_gang_fates.py)
    assert (record.status.value, record.message) == ("STOPPING", "node 1: boom")
    assert actions(publisher, "vm-1")[-1] == "STOP"
    beat(functions, "vm-1", "STOPPED", 4, exit_code=-15)  # its answer: kept, per node
    record = job(zen, "g")
    assert (record.status.value, record.exit_code, record.message) == ("FAILED", 3, "node 1: boom")
    assert [(n.status, n.exit_code) for n in record.gang] == [("STOPPED", -15), ("FAILED", 3)]
    beat(functions, "vm-1", "RUNNING", 5)  # a node of an ended gang still running is told to stop
    assert actions(publisher, "vm-1")[-1] == "STOP"


def test_a_failed_node_with_retries_left_sends_the_whole_gang_back_as_the_next_attempt(functions, zen, publisher,
                                                                                      clock):
    """max_retries on a gang (zen.core.retries): the first node's retried exit stops the attempt's other nodes
    (STOPPING: no retry runs beside one of them), then the job waits PENDING for its backoff as attempt 2, a new
    gang; a failure with no retry left ends it FAILED as before."""
    functions.submit(job_request("g", nodes=2, max_retries=1, retry_exit_codes=[3], retry_backoff_s=10))
    claim(functions, "vm-1")
    claim(functions, "vm-2")
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    beat(functions, "vm-2", "FAILED", 3, exit_code=3)
    assert (job(zen, "g").status.value, job(zen, "g").attempt) == ("STOPPING", 1)
    assert actions(publisher, "vm-1")[-1] == "STOP" and actions(publisher, "vm-2") == ["CONFIRM"]
    beat(functions, "vm-1", "STOPPED", 4, exit_code=-15)  # the attempt's last node has stopped: now retried
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.gang, record.retries) == ("PENDING", 2, None, 1)
    assert record.hold is not None and record.hold.startswith("retry 1 of 1")
    with zen.db.transaction() as session:
        steps = [(r["attempt"], r["to_status"], r["reason"]) for r in repository.job_history(session, "g")]
    assert (1, "PENDING", "node 1 (vm-2): attempt 1 failed with exit code 3: retry 1 of 1 after 10 s") in steps, steps
    clock.advance(11)
    functions.tick()  # the backoff is over: let go, two starts for the new gang
    assert job(zen, "g").status.value == "QUEUED"
    assert [json.loads(m.data)["attempt"] for m in publisher.on("zen-job-start")][-2:] == [2, 2]
    claim(functions, "vm-3", attempt=2)
    claim(functions, "vm-4", attempt=2)
    beat(functions, "vm-3", "RUNNING", 2, attempt=2)
    beat(functions, "vm-3", "FAILED", 3, attempt=2, exit_code=3)  # no retry left: FAILED, the other stopped
    assert actions(publisher, "vm-4")[-1] == "STOP"
    beat(functions, "vm-4", "STOPPED", 3, attempt=2, exit_code=-15)
    record = job(zen, "g")
    assert (record.status.value, record.exit_code, record.attempt) == ("FAILED", 3, 2)


def test_a_preempted_node_requeues_the_whole_gang_as_one_new_attempt(functions, zen, publisher):
    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    starts = len(publisher.on("zen-job-start"))
    beat(functions, "vm-2", "PREEMPTED", 3)
    record = job(zen, "g")  # the other node is stopped first: no next attempt beside it
    assert (record.status.value, record.attempt) == ("STOPPING", 1)
    assert actions(publisher, "vm-1")[-1] == "STOP" and actions(publisher, "vm-2") == ["CONFIRM"]
    assert len(publisher.on("zen-job-start")) == starts
    beat(functions, "vm-1", "RUNNING", 4)  # still running: told to stop again
    assert actions(publisher, "vm-1")[-1] == "STOP" and job(zen, "g").attempt == 1
    beat(functions, "vm-1", "STOPPED", 5)
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.gang, record.vm) == ("QUEUED", 2, None, None)
    assert (record.max_attempts, record.preemptions) == (4, 1)  # the cloud's doing: no attempt spent
    fresh = [json.loads(m.data) for m in publisher.on("zen-job-start")][-2:]
    assert [s["attempt"] for s in fresh] == [2, 2]  # a start for each node of the new attempt
    claim(functions, "vm-1", seq=10, attempt=2)
    claim(functions, "vm-3", attempt=2)
    assert job(zen, "g").status.value == "ASSIGNED"


def test_a_silent_node_loses_the_attempt_for_every_node(functions, zen, publisher, clock):
    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    for seq in range(3, 7):  # vm-1 beats on, vm-2 is silent
        clock.advance(40)
        beat(functions, "vm-1", "RUNNING", seq)
        functions.tick()
    record = job(zen, "g")  # vm-1 is stopped first: the next attempt never runs beside it
    assert (record.status.value, record.attempt) == ("STOPPING", 1)
    assert actions(publisher, "vm-1")[-1] == "STOP" and actions(publisher, "vm-2")[-1] == "STOP"
    beat(functions, "vm-1", "STOPPED", 7, exit_code=-15)
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.max_attempts) == ("QUEUED", 2, 3)  # silence spends one
    with zen.db.transaction() as session:
        steps = [(r["to_status"], r["reason"]) for r in repository.job_history(session, "g") if r["to_status"]]
    assert ("STOPPING", "no heartbeat from node 1 (vm-2) for 120s: the other nodes are stopped before the rerun") in steps
    assert ("LOST", "no heartbeat from node 1") in steps, steps


def test_a_users_stop_stops_every_node(functions, zen, publisher):
    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    functions.stop({"job_id": "g", "reason": "done early"})
    assert job(zen, "g").status.value == "STOPPING"
    assert actions(publisher, "vm-1")[-1] == actions(publisher, "vm-2")[-1] == "STOP"
    beat(functions, "vm-2", "RUNNING", 2)  # sent before the stop reached it: told again, with the user's reason
    assert [c["reason"] for c in controls(publisher, "vm-2") if c["action"] == "STOP"] == ["done early"] * 2
    # Every node's STOP says by when Zen must have its answer (only rank 0's did: the others' uploads after
    # the stop ran on, bounded by nothing, after Zen had ended the gang CANCELLED)
    assert {m.attributes["vm"]: m.attributes.get("answer_within_s") for m in publisher.on("zen-vm-control")
            if m.attributes["action"] == "STOP"} == {"vm-1": "120", "vm-2": "120"}
    beat(functions, "vm-1", "STOPPED", 3, exit_code=-15)
    assert job(zen, "g").status.value == "STOPPING"  # until every node answered
    beat(functions, "vm-2", "STOPPED", 3, exit_code=-15)
    assert job(zen, "g").status.value == "CANCELLED"


def test_a_stop_while_the_gang_assembles_releases_the_nodes_that_claimed(functions, zen, publisher):
    functions.submit(job_request("g", nodes=3))
    claim(functions, "vm-1")
    functions.stop({"job_id": "g"})
    assert job(zen, "g").status.value == "CANCELLED"
    assert actions(publisher, "vm-1") == ["RELEASE"]


def test_a_gang_not_complete_in_time_releases_its_vms_and_is_retried(functions, zen, publisher, clock, config, capsys):
    from zen.cli.main import main

    functions.submit(job_request("g", nodes=2))
    claim(functions, "vm-1")
    clock.advance(config.gangs.assemble_s - 1)
    functions.tick()
    assert (job(zen, "g").attempt, actions(publisher, "vm-1")) == (1, [])  # not yet
    clock.advance(2)
    functions.tick()
    record = job(zen, "g")
    others = [r for r in record.regions if r != "us-central1"]
    assert (record.status.value, record.attempt, record.max_attempts, record.gang, record.start_regions) == (
        "QUEUED", 2, 4, None, others)  # a retry that spends no attempt (nothing ran), elsewhere first
    assert actions(publisher, "vm-1") == ["RELEASE"]
    starts = publisher.on("zen-job-start")
    assert [json.loads(m.data)["attempt"] for m in starts] == [1, 1, 2, 2]
    assert starts[-1].attributes["regions"] == ",".join(others)  # not where the released VM idles
    assert main(["explain", "g"]) == 0
    assert (f"waiting for a VM of 4xa100-40gb in {', '.join(others)} (a gang of 2: none claimed yet; sent there first, "
            "away from the region its last attempt could not assemble in") in capsys.readouterr().out
    claim(functions, "vm-1", seq=3)  # a late repeat of its old claim: released, joins nothing
    assert actions(publisher, "vm-1") == ["RELEASE", "RELEASE"] and job(zen, "g").gang is None
    clock.advance(config.gangs.assemble_s + 1)  # nobody elsewhere claimed it: every region again
    functions.tick()
    record = job(zen, "g")
    assert (record.attempt, record.start_regions, record.widen_at) == (2, None, None)
    assert publisher.on("zen-job-start")[-1].attributes["regions"] == "*"


def test_a_gang_assembling_where_a_stockout_blocks_is_released_at_the_next_tick(functions, zen, publisher, clock,
                                                                               config):
    """Its first node claimed in us-central1, then the planner found us-central1 stocked out: the rest
    cannot come from there, so the tick releases the node (not at the deadline) and the next attempt's
    start goes to the other regions, where the gang can assemble whole."""
    from datetime import timedelta

    from zen.store import fleet

    functions.submit(job_request("g", nodes=2))
    claim(functions, "vm-1")
    functions.tick()
    assert (job(zen, "g").attempt, actions(publisher, "vm-1")) == (1, [])  # no stockout: it waits
    with zen.db.transaction() as session:
        fleet.save_scaling_memory(session, "4xa100-40gb", "us-central1", json.dumps(
            {"blocked_until": (clock() + timedelta(minutes=10)).isoformat()}), clock())
    clock.advance(30)
    functions.tick()
    record = job(zen, "g")
    assert (record.attempt, record.gang) == (2, None) and actions(publisher, "vm-1") == ["RELEASE"]
    assert "us-central1" not in record.start_regions
    assert controls(publisher, "vm-1")[-1]["reason"].startswith("us-central1 is stocked out: 1 of 2 nodes claimed (vm-1)")


def test_jobs_get_and_explain_say_how_many_nodes_are_up_and_where(functions, zen, publisher, capsys):
    from zen.cli.main import main

    functions.submit(job_request("g", nodes=2))
    claim(functions, "vm-1")
    assert main(["explain", "g"]) == 0
    assert "a gang of 2: 1 claimed in us-central1 (vm-1), the rest until" in capsys.readouterr().out
    claim(functions, "vm-2")
    beat(functions, "vm-1", "RUNNING", 2)
    assert main(["explain", "g"]) == 0
    assert "running: 2 of 2 nodes up in us-central1 (vm-1, vm-2)" in capsys.readouterr().out
    assert main(["jobs", "get", "g"]) == 0
    shown = capsys.readouterr().out
    assert "nodes: 2: 2 of 2 up in us-central1" in shown
    assert "rank 0: vm-1 us-central1-a 10.0.0.1 RUNNING" in shown and "rank 1: vm-2 us-central1-a 10.0.0.2 CLAIMED" in shown
    assert main(["jobs", "get", "g", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["nodes"] == 2 and [n["vm"] for n in got["gang"]] == ["vm-1", "vm-2"]


def test_a_gangs_nodes_hold_their_vms_and_only_its_missing_nodes_are_demand(functions, zen, publisher, clock):
    from zen.scaling.fleetdb import demand_groups
    from zen.store import fleet

    functions.submit(job_request("g", nodes=3))
    claim(functions, "vm-1")
    with zen.db.transaction() as session:
        [row] = fleet.queued_demand(session, "4xa100-40gb", clock(), 600)
        assert (row["jobs"], row["nodes"], row["need"], row["vms"]) == (1, 3, 2, 2)  # one gang, two nodes to find
        assert fleet.held_vms(session, "4xa100-40gb") == {"vm-1": "g"}  # a part claimed holds its VM
        assert not fleet.drain_unless_busy(session, "vm-1", "4xa100-40gb", "us-central1", clock())
    functions.submit(job_request("h", nodes=3))  # a second gang, none of it claimed: a group of its own
    with zen.db.transaction() as session:
        rows = fleet.queued_demand(session, "4xa100-40gb", clock(), 600)
        assert sorted((r["jobs"], r["nodes"], r["need"], r["vms"]) for r in rows) == [(1, 3, 2, 2), (1, 3, 3, 3)]
        [low, high] = sorted((g.part, g.count) for g in demand_groups(rows, zen.config.cluster("4xa100-40gb")))
        assert (low, high) == ((2, 2), (3, 3))
    claim(functions, "vm-2")
    claim(functions, "vm-3")
    functions.stop({"job_id": "h"})
    with zen.db.transaction() as session:
        assert fleet.queued_demand(session, "4xa100-40gb", clock(), 600) == []
        assert fleet.held_vms(session, "4xa100-40gb") == {"vm-1": "g", "vm-2": "g", "vm-3": "g"}
        assert not fleet.drain_unless_busy(session, "vm-3", "4xa100-40gb", "us-central1", clock())
        assert fleet.drain_unless_busy(session, "vm-9", "4xa100-40gb", "us-central1", clock())


def test_a_late_final_report_of_a_lost_gang_attempt_does_not_end_the_gang(functions, zen, publisher, clock):
    """For one VM, a lost attempt's late SUCCEEDED ends the job as that attempt (zen.jobs.late_final); one
    node's word is not the gang's (its other node went silent), so the gang waits for its new attempt."""
    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    for seq in range(3, 7):
        clock.advance(40)
        beat(functions, "vm-1", "RUNNING", seq)
        functions.tick()
    assert (job(zen, "g").status.value, job(zen, "g").attempt) == ("STOPPING", 1)  # vm-1 told STOP first
    beat(functions, "vm-1", "SUCCEEDED", 9, exit_code=0)  # rank 0, the job's vm, ends attempt 1 as it stops
    assert (job(zen, "g").status.value, job(zen, "g").attempt) == ("QUEUED", 2)


def test_a_gangs_usage_counts_every_node(functions, zen, publisher):
    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    beat(functions, "vm-1", "SUCCEEDED", 3, exit_code=0)
    beat(functions, "vm-2", "SUCCEEDED", 3, exit_code=0)
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT gpus, vm_share, outcome FROM attempt_usage WHERE job_id = 'g'")
    assert (row["gpus"], row["vm_share"], row["outcome"]) == (8, 2.0, "SUCCEEDED")  # 2 VMs of 4 GPUs


def test_zen_stats_counts_gangs_waiting_for_their_last_node(functions, zen, publisher):
    from zen.store import stats

    functions.submit(job_request("g", nodes=3))
    claim(functions, "vm-1")
    claim(functions, "vm-2")
    with zen.db.transaction() as session:
        assert stats.run(session, "gangs_waiting") == [{"cluster": "4xa100-40gb", "gangs": 1, "nodes": 2}]
    claim(functions, "vm-3")
    with zen.db.transaction() as session:
        assert stats.run(session, "gangs_waiting") == []  # complete: nobody waits


def test_a_nodes_final_report_delivered_again_after_the_end_is_a_plain_duplicate(functions, zen, publisher):
    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "FAILED", 3, exit_code=1)
    beat(functions, "vm-1", "STOPPED", 4, exit_code=-15)
    beat(functions, "vm-1", "STOPPED", 4, exit_code=-15)  # Pub/Sub delivers it again
    beat(functions, "vm-2", "FAILED", 3, exit_code=1)
    with zen.db.transaction() as session:
        assert session.sql("SELECT count(*) AS n FROM rejected_messages")[0]["n"] == 0  # no noise
    assert [(n.status, n.exit_code) for n in job(zen, "g").gang] == [("STOPPED", -15), ("FAILED", 1)]


def test_concurrent_claims_each_take_one_rank_and_every_vm_at_most_one(zen, publisher):
    """6 VMs claim a 4-node gang at once, each claim delivered twice: the row lock applies them one at a
    time, so ranks 0..3 go to 4 distinct VMs, each confirmed with its own place only, and the other 2 released."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from tests.test_queues import PUBSUB_EVENT_TYPE
    from zen.core import eventarc

    def deliver(topic, payload, message_id):
        data = eventarc.pubsub_cloud_event(json.dumps(payload).encode(), message_id=message_id, topic=topic,
                                           project=zen.config.project)["data"]
        handler = zen.on_job_submitted if topic == "zen-job-submitted" else zen.on_heartbeat
        handler(message_id, PUBSUB_EVENT_TYPE, data)

    deliver("zen-job-submitted", job_request("g", nodes=4), "s-1")
    vms = [f"vm-{i}" for i in range(1, 7)]
    start = threading.Barrier(6)

    def claim_twice(vm):
        start.wait(10)
        for copy in range(2):
            deliver("zen-heartbeats", heartbeat("g", "CLAIMED", 1, vm=vm, ip=f"10.0.0.{vm[-1]}"), f"{vm}-{copy}")

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(claim_twice, vms))
    record = job(zen, "g")
    assert record.status.value == "ASSIGNED" and [n.rank for n in record.gang] == [0, 1, 2, 3]
    members = [n.vm for n in record.gang]
    assert len(set(members)) == 4
    confirms = [c for c in controls(publisher) if c["action"] == "CONFIRM"]
    # A copy delivered again after the gang completed is answered again, with the same place.
    assert {(c["vm"], c["gang"]["rank"]) for c in confirms} == {(n.vm, n.rank) for n in record.gang}
    assert all(c["gang"]["ips"] == [n.ip for n in record.gang] for c in confirms)
    for vm in set(vms) - set(members):
        assert actions(publisher, vm) and set(actions(publisher, vm)) == {"RELEASE"}


def test_a_node_preempted_while_the_gang_assembles_leaves_it_and_its_place_is_offered_again(functions, zen, publisher):
    functions.submit(job_request("g", nodes=2))
    claim(functions, "vm-1")
    beat(functions, "vm-1", "PREEMPTED", 2)  # its VM went away while it waited for the second node
    record = job(zen, "g")
    assert (record.status.value, record.gang, record.attempt) == ("QUEUED", None, 1)
    assert len(publisher.on("zen-job-start")) == 4  # 2 at first, then one for each place nobody holds
    claim(functions, "vm-2")
    claim(functions, "vm-3")
    assert [n.vm for n in job(zen, "g").gang] == ["vm-2", "vm-3"]  # the gone VM is no node of it


def test_a_gang_assembling_where_its_limits_leave_no_room_for_the_rest_is_released_at_the_next_tick(
        functions, zen, publisher, clock):
    """Its first node claimed in us-central1, where the planner's last pass left room for no more VMs
    (the other VMs there busy, the pool at max_vms_per_region): the rest cannot come, so the tick releases
    the node and the next attempt's start goes elsewhere first. With room for the rest, it waits; and a
    pass from before the claim says nothing of it (the pool as it was for other jobs or the gang's last
    attempt: a node of it busy, a preempted one not yet coming back)."""
    from zen.store import fleet

    def room(n):
        with zen.db.transaction() as session:
            memory = {"gang_room": n, "gang_room_at": clock().isoformat()}
            fleet.save_scaling_memory(session, "4xa100-40gb", "us-central1", json.dumps(memory), clock())

    functions.submit(job_request("g", nodes=2))
    room(0)  # a pass before the claim
    clock.advance(1)
    claim(functions, "vm-1")
    clock.advance(1)
    room(0)  # a pass that read the fleet so soon after the claim that it may have missed it
    clock.advance(30)
    functions.tick()
    assert (job(zen, "g").attempt, actions(publisher, "vm-1")) == (1, [])  # not known since its claim
    room(1)
    clock.advance(30)
    functions.tick()
    assert (job(zen, "g").attempt, actions(publisher, "vm-1")) == (1, [])  # room for its one more node
    room(0)
    clock.advance(30)
    functions.tick()
    record = job(zen, "g")
    assert (record.attempt, record.gang) == (2, None) and actions(publisher, "vm-1") == ["RELEASE"]
    assert "us-central1" not in record.start_regions
    assert controls(publisher, "vm-1")[-1]["reason"].startswith(
        "us-central1 has room for 0 more of the 1 VM(s) the gang needs (its limits): 1 of 2 nodes claimed (vm-1)")

    functions.submit(job_request("h", nodes=2, regions=["us-central1"]))  # no other region to go to
    functions.heartbeat(heartbeat("h", "CLAIMED", 1, vm="vm-2", ip="10.0.0.2"))
    clock.advance(5)
    room(0)
    clock.advance(30)
    functions.tick()
    assert (job(zen, "h").attempt, actions(publisher, "vm-2")) == (1, [])  # released, vm-2 would claim it again


def test_a_tick_releases_a_gang_short_of_room_after_its_own_pass_found_so(zen, functions, publisher, clock, db):
    """The tick's sweep before its pass reads the last pass's room, which missed a claim made since; the
    tick looks at gangs again after its own pass, so a gang whose region its pass finds full goes in that
    tick, not the next. (The pass here: a scaler behind zen.app.Scaler that records what a pass would.)"""
    from zen.store import fleet

    class FullRegion:
        passes = 0

        def tick(self):
            self.passes += 1
            with db.transaction() as session:
                memory = {"gang_room": 0, "gang_room_at": clock().isoformat()}
                fleet.save_scaling_memory(session, "4xa100-40gb", "us-central1", json.dumps(memory), clock())

        def scale(self, cluster):
            return None

        def covered(self, cluster, regions=None):
            return False

        def racing(self, cluster):
            return False

    zen.scaler = scaler = FullRegion()
    functions.submit(job_request("g", nodes=2))
    clock.advance(30)
    functions.tick()  # a pass before any claim
    clock.advance(5)
    claim(functions, "vm-1")
    clock.advance(30)
    functions.tick()
    record = job(zen, "g")
    assert scaler.passes == 2 and (record.attempt, actions(publisher, "vm-1")) == (2, ["RELEASE"])


def test_a_gang_stays_while_every_other_region_is_stocked_out_or_was_lately_then_moves_to_a_settled_one(
        functions, zen, publisher, clock):
    """Releasing it to a region blocked now, or whose block lapsed between the planner's probes after a
    stockout found within assemble_s, would only move it to a region as likely to fail it (and back, tick
    after tick). It stays while every other region is so; once one is settled, it goes there."""
    from datetime import timedelta

    from zen.store import fleet

    def remember(region, **memory):
        with zen.db.transaction() as session:
            fleet.save_scaling_memory(session, "4xa100-40gb", region, json.dumps(
                {key: value.isoformat() for key, value in memory.items()}), clock())

    functions.submit(job_request("g", nodes=2))
    claim(functions, "vm-1")
    remember("us-central1", blocked_until=clock() + timedelta(minutes=10), last_stockout_at=clock())
    remember("us-west1", blocked_until=clock() + timedelta(minutes=10), last_stockout_at=clock())
    remember("europe-west4", last_stockout_at=clock() - timedelta(minutes=1))  # its block lapsed: a probe is due
    for _ in range(3):
        clock.advance(20)
        functions.tick()
    assert (job(zen, "g").attempt, actions(publisher, "vm-1")) == (1, [])
    remember("europe-west4", last_stockout_at=clock() - timedelta(minutes=11))  # settled: older than 600 s
    clock.advance(20)
    functions.tick()
    record = job(zen, "g")
    assert record.attempt == 2 and actions(publisher, "vm-1") == ["RELEASE"]
    assert record.start_regions == ["europe-west4"]
    assert controls(publisher, "vm-1")[-1]["reason"].startswith("us-central1 is stocked out")  # not the deadline


def test_a_node_that_ended_early_does_not_make_the_running_gang_silent(functions, zen, publisher, clock):
    """Rank 0 exits 0 and reports; rank 1 runs on (uploading its outputs), heartbeating: the gang is not lost,
    and it succeeds when rank 1 does, with one attempt allowed."""
    functions.submit(job_request("g", nodes=2, max_attempts=1))
    claim(functions, "vm-1")
    claim(functions, "vm-2")
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    beat(functions, "vm-1", "SUCCEEDED", 3, exit_code=0)
    for seq in range(3, 8):  # 200 s, beyond heartbeat_timeout_s after vm-1's last word
        clock.advance(40)
        beat(functions, "vm-2", "RUNNING", seq)
        functions.tick()
    record = job(zen, "g")
    assert (record.status.value, record.attempt) == ("RUNNING", 1) and "STOP" not in actions(publisher, "vm-2")
    from zen.store import fleet

    with zen.db.transaction() as session:  # vm-1 is idle: free for other work or a scale-down, vm-2 is not
        assert fleet.held_vms(session, "4xa100-40gb") == {"vm-2": "g"}
        assert not fleet.drain_unless_busy(session, "vm-2", "4xa100-40gb", "us-central1", clock())
        assert fleet.drain_unless_busy(session, "vm-1", "4xa100-40gb", "us-central1", clock())
    beat(functions, "vm-2", "SUCCEEDED", 9, exit_code=0)
    assert job(zen, "g").status.value == "SUCCEEDED"


def test_a_gang_that_took_longer_than_the_heartbeat_timeout_to_assemble_is_not_silent_once_complete(
        functions, zen, publisher, clock):
    """The first node waits 140 s for the second, claiming again every 20 s (its repeated claims are not
    written): the tick right after the gang completes finds every node heard from just now."""
    functions.submit(job_request("g", nodes=2))
    claim(functions, "vm-1", seq=1)
    for seq in range(2, 9):
        clock.advance(20)
        claim(functions, "vm-1", seq=seq)
    claim(functions, "vm-2", seq=1)
    functions.tick()
    record = job(zen, "g")
    assert (record.status.value, record.attempt) == ("ASSIGNED", 1) and "STOP" not in actions(publisher, "vm-1")
    clock.advance(130)  # then silence from both is silence
    functions.tick()
    assert job(zen, "g").attempt == 2


def test_a_gang_completed_after_a_node_gave_its_part_back_is_retried_not_run_short(functions, zen, publisher, clock,
                                                                                   config):
    """The first node's agent gives up its claim (its wait over) a moment before the last node claims and
    before the tick would release the gang: the gang completes, the last node is confirmed, and then the
    first node's VM heartbeat says it gave its part back. The confirmed node is stopped and, once it answered
    (never beside it), the gang retried as attempt 2, its budget not spent."""
    from tests.test_given_back_claims import T, vm_beat

    functions.submit(job_request("g", nodes=2, max_attempts=1))
    functions.heartbeat(heartbeat("g", "CLAIMED", T, vm="vm-1", ip="10.0.0.1"))
    clock.advance(config.gangs.assemble_s + 20)
    functions.heartbeat(heartbeat("g", "CLAIMED", T + 1, vm="vm-2", ip="10.0.0.2"))
    assert job(zen, "g").status.value == "ASSIGNED"
    functions.heartbeat(vm_beat("vm-1", T + 620_000, ("g", 1)))
    assert job(zen, "g").status.value == "STOPPING"
    assert actions(publisher, "vm-2")[-1] == "STOP" and "STOP" not in actions(publisher, "vm-1")
    functions.heartbeat(heartbeat("g", "RUNNING", T + 2, vm="vm-2"))  # its command began before the STOP: told again
    assert actions(publisher, "vm-2")[-1] == "STOP"
    functions.heartbeat(heartbeat("g", "STOPPED", T + 3, vm="vm-2"))
    record = job(zen, "g")
    assert (record.status.value, record.attempt, record.max_attempts, record.gang, record.vm) == (
        "QUEUED", 2, 2, None, None)


def test_a_stop_of_an_array_of_gangs_stops_every_node_and_releases_every_part(functions, zen, publisher):
    functions.submit(job_request("arr", nodes=2, array={"count": 2}))
    for vm in ("vm-1", "vm-2"):  # task 0 assembles and runs on two nodes
        functions.heartbeat(heartbeat("arr-0", "CLAIMED", 1, vm=vm, ip=f"10.0.0.{vm[-1]}"))
        functions.heartbeat(heartbeat("arr-0", "RUNNING", 2, vm=vm))
    functions.heartbeat(heartbeat("arr-1", "CLAIMED", 1, vm="vm-3", ip="10.0.0.3"))  # task 1: 1 of 2 nodes
    functions.stop({"job_id": "arr", "reason": "enough"})
    assert job(zen, "arr-0").status.value == "STOPPING" and job(zen, "arr-1").status.value == "CANCELLED"
    assert [actions(publisher, vm)[-1] for vm in ("vm-1", "vm-2", "vm-3")] == ["STOP", "STOP", "RELEASE"]


def test_the_stop_a_preempted_peer_sends_the_other_nodes_reads_as_a_preemption(functions, zen, publisher):
    """It read "node 1 (vm-2) was preempted" (then "stop requested"): no ZEN_PREEMPTION_NOTICE on the other nodes,
    and a job that checkpoints at the notice saved nothing for the rerun that comes."""
    from zen.core.stops import preempts

    assembled(functions, zen, publisher)
    beat(functions, "vm-1", "RUNNING", 2)
    beat(functions, "vm-2", "RUNNING", 2)
    beat(functions, "vm-2", "PREEMPTED", 3)  # the cloud takes vm-2 back: the gang will run again
    assert job(zen, "g").status.value == "STOPPING"
    stop = [c for c in controls(publisher, "vm-1") if c["action"] == "STOP"][-1]
    assert preempts(stop["reason"]), stop["reason"]  # "node 1 (vm-2) was preempted": no notice on vm-1
    beat(functions, "vm-1", "RUNNING", 4)  # still running: told again
    again = [c for c in controls(publisher, "vm-1") if c["action"] == "STOP"][-1]
    assert preempts(again["reason"]), again["reason"]  # "stop requested"


def test_each_nodes_confirm_answers_its_own_last_claim(functions, zen, publisher):
    """Only the node whose claim completed the gang had its CONFIRM name the claim it answers: another node that
    hung while its CONFIRM waited, then claimed again, counted its lease from that later claim and ran the
    attempt beside Zen's rerun (``zen.agent.claim``: a CONFIRM read after the lease of its claim ran out)."""
    functions.submit(job_request("g", nodes=2))
    claim(functions, "vm-1")
    claim(functions, "vm-1", seq=4)  # its claim repeated while it waits
    claim(functions, "vm-2", seq=7)  # completes the gang
    answers = {json.loads(m.data)["vm"]: m.attributes.get("answers") for m in publisher.on("zen-vm-control")
               if json.loads(m.data)["action"] == "CONFIRM"}
    assert answers == {"vm-1": "4", "vm-2": "7"}


def test_a_silent_node_on_the_last_attempt_does_not_promise_a_rerun(functions, zen, publisher, clock):
    """The notice promises a rerun (zen.core.stops): a silence spends the attempt, and on the last one the gang
    ends FAILED, so the other node's STOP must not read as a preemption's."""
    from zen.core.stops import preempts

    functions.submit(job_request("g", nodes=2, max_attempts=1))
    for vm in ("vm-1", "vm-2"):
        claim(functions, vm)
        beat(functions, vm, "RUNNING", 2)
    for seq in range(3, 7):  # vm-2 goes silent; vm-1 keeps reporting
        clock.advance(40)
        beat(functions, "vm-1", "RUNNING", seq)
        functions.tick()
    assert job(zen, "g").status.value == "STOPPING"
    stop = [c for c in controls(publisher, "vm-1") if c["action"] == "STOP"][-1]
    assert not preempts(stop["reason"]), stop["reason"]
    beat(functions, "vm-1", "RUNNING", 8)  # told again: the same
    assert not preempts([c for c in controls(publisher, "vm-1") if c["action"] == "STOP"][-1]["reason"])
    beat(functions, "vm-1", "STOPPED", 10, exit_code=-15)
    assert job(zen, "g").status.value == "FAILED"
