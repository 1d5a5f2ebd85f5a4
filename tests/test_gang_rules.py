"""The pure gang rules (zen.core.gang) on hand-built jobs: a queue's preemption of a gang, a node giving
its part back while the gang assembles, and a job of one node left exactly to zen.core.lifecycle."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tests.messages import heartbeat
from zen.core import gang, gang_ends, lifecycle, silence
from zen.core.gang_records import GangConfig, GangNode
from zen.core.models import ControlAction, Heartbeat, Job, JobStatus, StopRequest

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def a_job(status=JobStatus.RUNNING, nodes=2, gang_vms=("vm-1", "vm-2"), **fields) -> Job:
    members = [GangNode(rank=i, vm=vm, region="us-central1", zone="us-central1-a", ip=f"10.0.0.{i}", seq=1,
                        beat_at=T0, status="RUNNING") for i, vm in enumerate(gang_vms)] or None
    values = dict(job_id="g", status=status, attempt=1, max_attempts=3, cluster="4xa100-40gb", user_id="alice",
                  priority=0, regions=["us-central1"], request={"nodes": nodes}, request_hash="h", max_runtime_s=None,
                  region="us-central1", zone="us-central1-a", vm=gang_vms[0] if gang_vms else None, last_seq=0,
                  last_heartbeat_at=T0, submitted_at=T0, queued_at=T0, started_at=T0, finished_at=None,
                  exit_code=None, message=None, updated_at=T0, nodes=nodes, gang=members)
    return Job.model_validate({**values, **fields})


def test_a_queues_preemption_stops_every_node_and_the_gang_goes_back_once_all_answered():
    job = a_job()
    decision = gang.decide_preempt(job, "queue prod needs its quota", T0)
    assert [c.to for c in decision.changes] == [JobStatus.STOPPING]
    assert {(c.vm, c.action) for c in decision.controls} == {("vm-1", ControlAction.STOP), ("vm-2", ControlAction.STOP)}
    stopping = job.model_copy(update={**decision.fields, "status": JobStatus.STOPPING})
    first = gang.decide_heartbeat(stopping, Heartbeat.model_validate(heartbeat("g", "STOPPED", 5, vm="vm-1")), T0,
                                  GangConfig())
    assert first.changes == []  # vm-2 has not answered yet
    both = stopping.model_copy(update=first.fields)
    last = gang.decide_heartbeat(both, Heartbeat.model_validate(heartbeat("g", "STOPPED", 5, vm="vm-2")), T0,
                                 GangConfig())
    assert [c.to for c in last.changes] == [JobStatus.PENDING]
    assert (last.fields["attempt"], last.fields["gang"], last.fields["max_attempts"]) == (2, None, 4)
    assert last.controls == []  # both answered: no STOP again


def test_a_node_killed_at_its_limit_as_the_queue_preempts_the_gang_fails_it_not_reruns_it():
    """As one VM's: the rerun would run into the same max_runtime_s."""
    job = a_job()
    decision = gang.decide_preempt(job, "queue prod needs its quota", T0)
    stopping = job.model_copy(update={**decision.fields, "status": JobStatus.STOPPING})
    first = gang.decide_heartbeat(stopping, Heartbeat.model_validate(heartbeat(
        "g", "FAILED", 5, vm="vm-1", exit_code=143, over_limit="max_runtime_s")), T0, GangConfig())
    last = gang.decide_heartbeat(stopping.model_copy(update=first.fields), Heartbeat.model_validate(
        heartbeat("g", "STOPPED", 5, vm="vm-2")), T0, GangConfig())
    assert [c.to for c in last.changes] == [JobStatus.FAILED] and "node 0 (vm-1) failed" in last.changes[0].reason


def test_a_node_that_gives_its_part_back_leaves_the_gang_and_the_ranks_after_it_move_up():
    job = a_job(JobStatus.QUEUED, nodes=3, gang_vms=("vm-1", "vm-2"), widen_at=T0 + timedelta(seconds=600))
    later = T0 + timedelta(seconds=30)
    decision = gang.decide_given_back(job, "vm-1", 1, 5, later)
    assert decision is not None and decision.publish_start
    assert [(n.rank, n.vm, n.left_at) for n in decision.fields["gang"]] == [(0, "vm-2", later)]
    assert gang.decide_given_back(job, "vm-1", 1, 1, later) is None  # a claim it made after that heartbeat stands
    assert gang.decide_given_back(job, "vm-9", 1, 5, later) is None


def test_the_room_a_pass_found_counts_only_if_it_read_the_fleet_after_the_gangs_last_claim_or_leave():
    """A pass before saw the region as it was for other jobs, the gang's last attempt, or a node that has
    left since (busy then; the gang needs one more VM now); one within 2 s of the change may have missed it."""
    claimed = GangNode(rank=0, vm="vm-2", region="us-central1", zone="us-central1-a", beat_at=T0)
    assert not gang.room_seen_after([claimed], None)
    assert not gang.room_seen_after([claimed], T0 + timedelta(seconds=1))
    assert gang.room_seen_after([claimed], T0 + timedelta(seconds=3))
    left = claimed.model_copy(update={"left_at": T0 + timedelta(seconds=30)})
    assert not gang.room_seen_after([left], T0 + timedelta(seconds=3))
    assert gang.room_seen_after([left], T0 + timedelta(seconds=33))


def test_a_job_of_one_node_is_decided_by_the_lifecycle_alone():
    single = a_job(nodes=1, gang_vms=("vm-1",)).model_copy(update={"gang": None})
    report = Heartbeat.model_validate(heartbeat("g", "FAILED", 7, vm="vm-1", exit_code=2))
    assert gang.decide_heartbeat(single, report, T0, GangConfig()) == lifecycle.decide_heartbeat(single, report, T0)
    assert silence.decide_silence(single, T0 + timedelta(hours=1), _deadlines()) == silence.decide_one_vm(
        single, T0 + timedelta(hours=1), _deadlines())


def _deadlines():
    from zen.core.config import load_config

    return load_config().deadlines


def test_master_port_stays_in_the_configured_range_and_differs_between_attempts():
    config = GangConfig(port=40000, ports=50)
    ports = {gang.master_port(config, "g", attempt) for attempt in range(1, 200)}
    assert min(ports) >= 40000 and max(ports) < 40050 and len(ports) > 1


def test_a_users_stop_reason_reading_as_a_preemption_is_marked_while_a_gang_stops_for_a_lost_node():
    """gang.decide_stop kept the user's reason as given while its gang stopped for a lost node: the STOP told again
    to a node that missed the first began "preempted: ", and its agent made ZEN_PREEMPTION_NOTICE appear."""
    job = a_job()
    lost = gang.decide_heartbeat(job, Heartbeat.model_validate(heartbeat("g", "PREEMPTED", 5, vm="vm-1")), T0,
                                 GangConfig())
    stopping = job.model_copy(update={**lost.fields, "status": lost.changes[-1].to})
    assert gang_ends.losing_node(stopping)
    stop = gang.decide_stop(stopping, StopRequest(job_id="g", reason="preempted: moving it to another queue"), T0)
    again = gang.decide_heartbeat(stopping.model_copy(update=stop.fields),
                                  Heartbeat.model_validate(heartbeat("g", "RUNNING", 6, vm="vm-2")), T0, GangConfig())
    [order] = [c for c in again.controls if c.action is ControlAction.STOP]
    assert order.reason == "stopped: preempted: moving it to another queue"


def test_a_node_giving_its_unstarted_part_back_while_the_gang_stops_is_its_answer_to_the_stop():
    """A user's stop of a gang whose node vm-2 had claimed but not started: its VM's word that it gave the
    claim back ends its part at once (the gang is not held, nor its VM counted busy, until the stop's timeout)."""
    stopping = a_job(JobStatus.STOPPING, stop_reason="user: not needed")
    stopping = stopping.model_copy(update={"gang": [stopping.gang[0], stopping.gang[1].model_copy(update={"status": "CLAIMED"})]})
    later = T0 + timedelta(seconds=30)
    waiting = gang.decide_given_back(stopping, "vm-2", 1, 5, later)
    assert waiting is not None and waiting.changes == []  # vm-1 still runs: its STOPPED ends the attempt
    assert [(n.vm, n.status, n.seq) for n in waiting.fields["gang"]] == [("vm-1", "RUNNING", 1), ("vm-2", "GAVE_BACK", 5)]
    answered = stopping.model_copy(update={"gang": [stopping.gang[0].model_copy(update={"status": "STOPPED"}),
                                                    stopping.gang[1]]})
    ended = gang.decide_given_back(answered, "vm-2", 1, 5, later)
    assert ended is not None and [c.to for c in ended.changes] == [JobStatus.CANCELLED]
    assert ended.fields["finished_at"] == later
    assert gang.decide_given_back(answered, "vm-2", 1, 1, later) is None  # a claim it made after that heartbeat stands
