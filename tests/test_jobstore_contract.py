"""The job store port's contract (``zen.jobs.store``): the same cases against the Postgres adapter (the
embedded Postgres) and the in-memory fake (``zen_dev.fakes.jobstore``), so the fake cannot drift from
what the job service relies on."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

import pytest

from zen.core.errors import DataRejected, TransientError
from zen.core.models import Job, JobStatus
from zen.jobs.outgoing import Enqueued, OutgoingMessage
from zen.jobs.store import ConcurrentChange, JobStore, repeat_key
from zen_dev.fakes.jobstore import InMemoryJobStore

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
CLUSTER, REGION = "4xa100-40gb", "us-central1"


class Seeding:
    """What a test sets up that the job side only reads (the scaling side writes it)."""

    def __init__(self, store: JobStore):
        self.store = store

    def block_region(self, cluster: str, region: str, until: datetime, found_at: datetime | None = None,
                     booted_at: datetime | None = None) -> None:
        if isinstance(self.store, InMemoryJobStore):
            self.store.block_region(cluster, region, until, found_at, booted_at)
            return
        from zen.store import fleet

        moments = {"last_stockout_at": found_at, "last_boot_at": booted_at}
        memory = {"blocked_until": until.isoformat(), **{k: v.isoformat() for k, v in moments.items() if v}}
        with self.store.db.transaction() as session:  # type: ignore[attr-defined]
            fleet.save_scaling_memory(session, cluster, region, json.dumps(memory), NOW)

    def room_for_gangs(self, cluster: str, pool: str, room: int, at: datetime = NOW) -> None:
        if isinstance(self.store, InMemoryJobStore):
            self.store.room_for_gangs(cluster, pool, room, at)
            return
        from zen.store import fleet

        with self.store.db.transaction() as session:  # type: ignore[attr-defined]
            memory = {"gang_room": room, "gang_room_at": at.isoformat()}
            fleet.save_scaling_memory(session, cluster, pool, json.dumps(memory), NOW)

    def drain_vm(self, vm: str) -> None:
        if isinstance(self.store, InMemoryJobStore):
            self.store.drain_vm(vm)
            return
        with self.store.db.transaction() as session:  # type: ignore[attr-defined]
            session.run("drain_vm", vm_name=vm, cluster=CLUSTER, region=REGION, now=NOW)


@pytest.fixture(params=["postgres", "memory"])
def store(request: pytest.FixtureRequest) -> Iterator[JobStore]:
    if request.param == "memory":
        yield InMemoryJobStore()
        return
    from zen.store.jobstore import PostgresJobStore

    yield PostgresJobStore(request.getfixturevalue("db"))


@pytest.fixture
def seed(store: JobStore) -> Seeding:
    return Seeding(store)


def a_job(job_id: str, status: JobStatus = JobStatus.PENDING, at: datetime = NOW, **changes: Any) -> Job:
    job = Job(job_id=job_id, status=status, attempt=1, max_attempts=3, cluster=CLUSTER, user_id="alice",
              priority=0, regions=[REGION], request={"job_id": job_id, "command": ["true"]}, request_hash="h",
              max_runtime_s=3600, region=None, zone=None, vm=None, last_seq=0, last_heartbeat_at=None,
              submitted_at=at, queued_at=None, started_at=None, finished_at=None, exit_code=None, message=None,
              updated_at=at, gpus=4)
    return job.model_copy(update=changes)


def inserted(store: JobStore, *jobs: Job) -> None:
    with store.transaction() as tx:
        for job in jobs:
            assert tx.insert_job(job)


def moved(store: JobStore, job_id: str, path: list[JobStatus], at: datetime = NOW, **fields: Any) -> Job:
    with store.transaction() as tx:
        before = tx.get_job(job_id, lock=True)
        assert before is not None
        status = path[-1] if path else before.status  # []: the status stays (a republish, a widening)
        tx.save_job(before, before.model_copy(update={"status": status, **fields}), path, at)
        after = tx.get_job(job_id)
    assert after is not None
    return after


def event(job_id: str, to: str, at: datetime = NOW, actor: str = "vm:vm-a", attempt: int = 1,
          frm: str | None = None) -> dict[str, Any]:
    return {"job_id": job_id, "at": at, "actor": actor, "attempt": attempt, "from_status": frm, "to_status": to,
            "reason": f"to {to}"}


def task(array_id: str, index: int) -> Job:
    job_id = f"{array_id}-{index}"
    return a_job(job_id, request={"job_id": job_id, "command": ["true"], "array": {"id": array_id, "index": index,
                                                                                    "count": 2}})


def test_jobs_and_arrays_share_one_namespace_of_ids(store):
    """A job X and an array X (its task X-0), or array a's task a-1 and an array a-1: whichever comes second
    writes nothing, as a job_id written twice does."""
    inserted(store, task("x", 0), task("x", 1), a_job("b"), task("a", 1))
    with store.transaction() as tx:
        assert not tx.insert_job(a_job("x"))  # an array's id
        assert not tx.insert_job(task("b", 0))  # a job's id as an array's
        assert not tx.insert_job(task("a-1", 0))  # a task's id as an array's
        assert tx.insert_job(a_job("x-2")) and tx.insert_job(task("b", 1))  # no array's id: written
    assert [j.job_id for j in store_jobs(store, "x", "b-0", "a-1-0")] == []


def store_jobs(store: JobStore, *job_ids: str) -> list[Job]:
    with store.transaction() as tx:
        return [job for job_id in job_ids if (job := tx.get_job(job_id)) is not None]


def test_a_job_id_is_written_once_and_read_back_as_written(store):
    inserted(store, a_job("j1", queue="q"))
    with store.transaction() as tx:
        assert not tx.insert_job(a_job("j1", priority=9))  # a redelivery or a reuse writes nothing
        job = tx.get_job("j1")
        assert tx.get_job("nobody") is None
    assert job is not None
    assert (job.status, job.attempt, job.priority, job.queue, job.gpus, job.regions) == (
        JobStatus.PENDING, 1, 0, "q", 4, [REGION])
    assert (job.submitted_at, job.updated_at, job.queued_at, job.last_seq) == (NOW, NOW, None, 0)


def test_a_save_is_guarded_by_the_status_and_attempt_it_was_read_with_and_by_the_table(store):
    inserted(store, a_job("j1", JobStatus.QUEUED))
    later = NOW + timedelta(seconds=5)
    with store.transaction() as tx:
        read = tx.get_job("j1", lock=True)
    assigned = moved(store, "j1", [JobStatus.ASSIGNED], later, vm="vm-a", region=REGION, last_seq=1)
    assert (assigned.status, assigned.vm, assigned.last_seq, assigned.updated_at) == (
        JobStatus.ASSIGNED, "vm-a", 1, later)
    assert assigned.cluster == CLUSTER and assigned.request == {"job_id": "j1", "command": ["true"]}
    with pytest.raises(ConcurrentChange), store.transaction() as tx:  # read before the change: stale
        tx.save_job(read, read.model_copy(update={"status": JobStatus.CANCELLED}), [JobStatus.CANCELLED], later)
    with pytest.raises(ConcurrentChange), store.transaction() as tx:  # not in the transition table
        tx.save_job(assigned, assigned.model_copy(update={"status": JobStatus.RUNNING}),
                    [JobStatus.SUCCEEDED, JobStatus.RUNNING], later)
    with store.transaction() as tx:
        assert tx.get_job("j1").status is JobStatus.ASSIGNED


def test_a_unit_of_work_that_fails_leaves_nothing_behind(store):
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.insert_job(a_job("j1"))
        tx.remember_early_stop("j2", "stop", NOW)
        tx.add_outbox([OutgoingMessage("t", b"x")], NOW)
        raise RuntimeError("a bug after the writes")
    with store.transaction() as tx:
        assert tx.get_job("j1") is None and tx.take_early_stops("j2") == []
        assert tx.unsent_outbox(NOW + timedelta(hours=1), 10) == []


def test_history_rows_come_back_in_the_order_written(store):
    inserted(store, a_job("j1"))
    with store.transaction() as tx:
        tx.add_job_events([event("j1", "PENDING", actor="user:alice"), event("j1", "QUEUED", frm="PENDING")])
        tx.add_job_events([event("j1", "CANCELLED", NOW + timedelta(seconds=1), frm="QUEUED", actor="user")])
        rows = tx.job_history("j1")
    assert [(r["actor"], r["from_status"], r["to_status"], r["attempt"]) for r in rows] == [
        ("user:alice", None, "PENDING", 1), ("vm:vm-a", "PENDING", "QUEUED", 1), ("user", "QUEUED", "CANCELLED", 1)]
    assert rows[0]["id"] < rows[1]["id"] < rows[2]["id"] and rows[2]["at"] == NOW + timedelta(seconds=1)


def test_a_kept_stop_is_taken_once_and_found_when_its_job_exists(store):
    with store.transaction() as tx:
        tx.remember_early_stop("j1", "first", NOW, "alice@example.com")  # with its proven sender
        tx.remember_early_stop("j1", "again", NOW + timedelta(seconds=1), "alice@example.com")  # a sender's first kept
        tx.remember_early_stop("j1", "second", NOW + timedelta(seconds=2), "bob@example.com")  # one a sender
        tx.remember_early_stop("j2", "old", NOW - timedelta(days=8))
        tx.remember_early_stop("j3", "unknown", NOW)
    inserted(store, a_job("j1"), a_job("j2"))
    with store.transaction() as tx:
        assert tx.early_stops_of_submitted_jobs(10) == ["j2", "j1"]  # oldest stop first; j3 has no job
        tx.forget_early_stops(NOW - timedelta(days=7))
        assert tx.early_stops_of_submitted_jobs(10) == ["j1"]
        assert tx.take_early_stops("j1") == [("first", "alice@example.com"), ("second", "bob@example.com")]
        assert tx.take_early_stops("j1") == []


def test_a_tasks_claim_finds_a_stop_kept_for_it_or_for_its_array(store):
    task = a_job("arr-1", request={"job_id": "arr-1", "command": ["true"], "array": {"id": "arr", "index": 1, "count": 2}})
    inserted(store, task, a_job("run-1"))
    with store.transaction() as tx:
        tx.remember_early_stop("arr", "the array's", NOW)
        tx.remember_early_stop("run", "a job's of that name, not run-1's array's", NOW)
    with store.transaction() as tx:
        assert tx.kept_stop_names("arr-1") == ["arr"] and tx.kept_stop_names("run-1") == []
        tx.remember_early_stop("arr-1", "the task's", NOW)
        assert tx.kept_stop_names("arr-1") == ["arr", "arr-1"] and tx.kept_stop_names("nobody") == []


def test_a_submission_is_written_once_queued_with_its_history_and_outbox_rows_in_order(store):
    committed: list[Enqueued] = []
    writer = store.submissions(committed.extend)
    queued = a_job("s1", JobStatus.QUEUED, queued_at=NOW, start_published_at=NOW, start_regions=[REGION])
    history = [{"actor": "user:alice", "from_status": None, "to_status": "PENDING", "reason": "submitted"},
               {"actor": "admission", "from_status": "PENDING", "to_status": "QUEUED", "reason": "admitted"}]
    messages = [OutgoingMessage("events", b"e1"), OutgoingMessage("events", b"e2"),
                OutgoingMessage("start", b"s", {"job_id": "s1"})]
    rows = writer.write(queued, history, messages, NOW)
    assert [row.message for row in rows] == messages and rows == committed
    assert [row.id for row in rows] == sorted(row.id for row in rows)
    assert writer.write(queued, history, messages, NOW) == []  # its job_id exists
    with store.transaction() as tx:
        tx.remember_early_stop("s2", "stopped first", NOW)
    assert writer.write(queued.model_copy(update={"job_id": "s2"}), history, messages, NOW) == []
    with store.transaction() as tx:
        job = tx.get_job("s1")
        assert tx.get_job("s2") is None
        steps = [(r["actor"], r["from_status"], r["to_status"], r["attempt"]) for r in tx.job_history("s1")]
        unsent = tx.unsent_outbox(NOW + timedelta(minutes=5), 10)
    assert job is not None and (job.status, job.queued_at, job.start_published_at, job.start_regions) == (
        JobStatus.QUEUED, NOW, NOW, [REGION])
    assert steps == [("user:alice", None, "PENDING", 1), ("admission", "PENDING", "QUEUED", 1)]
    assert [(row.id, row.message) for row in unsent] == [(row.id, row.message) for row in rows]


def test_the_outbox_resends_failed_and_old_rows_least_tried_first_and_prunes_sent_ones(store):
    old = NOW - timedelta(minutes=5)
    with store.transaction() as tx:
        first = tx.add_outbox([OutgoingMessage("a", b"1", {"k": "v"}), OutgoingMessage("b", b"2")], old)
        second = tx.add_outbox([OutgoingMessage("c", b"3")], NOW)
    assert first[0] < first[1] < second[0]
    with store.transaction() as tx:
        assert [(r.id, r.message) for r in tx.unsent_outbox(NOW - timedelta(minutes=1), 10)] == [
            (first[0], OutgoingMessage("a", b"1", {"k": "v"})), (first[1], OutgoingMessage("b", b"2"))]
        tx.mark_outbox_failed(first[0], "RuntimeError: down")
        tx.mark_outbox_sent([first[1]], NOW)
    with store.transaction() as tx:
        assert [r.id for r in tx.unsent_outbox(NOW - timedelta(minutes=10), 10)] == [first[0]]  # failed: any age
        assert [r.id for r in tx.unsent_outbox(NOW + timedelta(minutes=1), 10)] == [second[0], first[0]]
        assert tx.prune_outbox(NOW + timedelta(seconds=1), 10) == 1
        assert tx.prune_outbox(NOW + timedelta(seconds=1), 10) == 0


def test_progress_is_recorded_only_for_the_running_attempt_from_its_vm_and_newer(store):
    inserted(store, a_job("j1", JobStatus.QUEUED))
    moved(store, "j1", [JobStatus.ASSIGNED], vm="vm-a", last_seq=1)
    moved(store, "j1", [JobStatus.RUNNING], last_seq=2, message="zen: staging inputs")
    later = NOW + timedelta(seconds=30)
    with store.session() as tx:
        assert tx.record_progress(job_id="j1", attempt=1, vm="vm-a", seq=3, message="zen: pulling", now=NOW)
        assert tx.get_job("j1").message == "zen: pulling"
        assert tx.record_progress(job_id="j1", attempt=1, vm="vm-a", seq=4, message=None, now=later)
        assert not tx.record_progress(job_id="j1", attempt=1, vm="vm-a", seq=4, message="again", now=later)
        assert not tx.record_progress(job_id="j1", attempt=1, vm="vm-b", seq=5, message=None, now=later)
        assert not tx.record_progress(job_id="j1", attempt=2, vm="vm-a", seq=5, message=None, now=later)
        job = tx.get_job("j1")
    assert (job.last_seq, job.last_heartbeat_at, job.message) == (4, later, None)  # its command runs: no note left


def test_sweep_candidates_come_oldest_first(store):
    inserted(store, a_job("held", JobStatus.QUEUED), a_job("queued", JobStatus.QUEUED),
             a_job("narrowed", JobStatus.QUEUED), a_job("p2", at=NOW + timedelta(seconds=1)), a_job("p1"))
    moved(store, "held", [JobStatus.ASSIGNED], vm="vm-a", last_heartbeat_at=NOW - timedelta(minutes=5))
    moved(store, "queued", [], queued_at=NOW, start_published_at=NOW - timedelta(minutes=9))
    moved(store, "narrowed", [], queued_at=NOW, start_published_at=NOW,
          widen_at=NOW - timedelta(seconds=1))
    with store.transaction() as tx:
        assert tx.held_jobs_silent_since(NOW - timedelta(minutes=1), 10) == ["held"]
        assert tx.held_jobs_silent_since(NOW - timedelta(minutes=6), 10) == []
        assert tx.queued_jobs_published_before(NOW - timedelta(minutes=1), 10) == ["queued"]
        assert tx.queued_jobs_to_widen(NOW, 10) == ["narrowed"]
        assert tx.pending_jobs(10) == ["p1", "p2"] and tx.pending_jobs(1) == ["p1"]


def test_a_running_attempt_whose_agent_fences_longer_is_a_candidate_only_past_its_fence(store):
    """Given the configuration's ``timeout_s``, a running attempt whose claim stated a longer one (``fence_timeout_s``:
    zen.core.lease.attempt_deadlines) is read only once silent that long; read sooner, such attempts filled the window."""
    inserted(store, a_job("fenced", JobStatus.QUEUED), a_job("plain", JobStatus.QUEUED))
    for job_id, minutes, fence in (("fenced", 4, 300.0), ("plain", 3, None)):
        moved(store, job_id, [JobStatus.ASSIGNED], vm=f"vm-{job_id}", last_heartbeat_at=NOW - timedelta(minutes=minutes),
              fence_timeout_s=fence)
    with store.transaction() as tx:
        assert tx.get_job("fenced").fence_timeout_s == 300.0
        assert tx.held_jobs_silent_since(NOW - timedelta(minutes=2), 10, timeout_s=120) == ["plain"]  # 240 s < 300 s
        assert tx.held_jobs_silent_since(NOW - timedelta(minutes=2), 10) == ["fenced", "plain"]  # no timeout given
        assert tx.held_jobs_silent_since(NOW, 10, timeout_s=120) == ["fenced", "plain"]  # 360 s of silence then


def test_sweep_candidates_are_each_past_their_own_deadline(store):
    """A held job is read once silent past its kind's deadline (``Sweeps.sweep_lost``): running, ``cutoff``; STOPPING
    for a user's stop, ``stop_cutoff``; taken back by its queue, or a gang stopping for a node lost, ``preempted_cutoff``."""
    gang = {"job_id": "gang", "command": ["true"], "nodes": 2}
    inserted(store, *(a_job(job_id, JobStatus.QUEUED) for job_id in ("run", "stop", "taken")),
             a_job("gang", JobStatus.QUEUED, request=gang, nodes=2))
    running = [JobStatus.ASSIGNED, JobStatus.RUNNING]
    for job_id, minutes, fields in (("run", 5, {}), ("stop", 6, {"stop_reason": "enough"}),
                                    ("taken", 7, {"preempted_by": "queue q"}), ("gang", 8, {})):
        moved(store, job_id, running + [JobStatus.STOPPING] * (job_id != "run"), vm=f"vm-{job_id}",
              last_heartbeat_at=NOW - timedelta(minutes=minutes), **fields)
    with store.transaction() as tx:
        assert tx.held_jobs_silent_since(NOW - timedelta(minutes=1), 10) == ["gang", "taken", "stop", "run"]
        assert tx.held_jobs_silent_since(NOW - timedelta(minutes=1), 10, NOW - timedelta(minutes=10),
                                         NOW - timedelta(minutes=3)) == ["gang", "taken", "run"]
        assert tx.held_jobs_silent_since(NOW - timedelta(minutes=6), 10, NOW - timedelta(minutes=2),
                                         NOW - timedelta(minutes=10)) == ["stop"]


def test_gangs_assembling_are_found_by_the_region_their_first_node_claimed_in(store):
    from zen.core.gang_records import GangNode

    def node(vm: str, region: str) -> GangNode:
        return GangNode(rank=0, vm=vm, region=region, zone=f"{region}-a", beat_at=NOW)

    gang = dict(nodes=2, regions=[REGION, "us-west1"])
    inserted(store, a_job("g-west", JobStatus.QUEUED, **gang), a_job("g-central", JobStatus.QUEUED, **gang),
             a_job("g-none", JobStatus.QUEUED, **gang), a_job("single", JobStatus.QUEUED))
    moved(store, "g-west", [], gang=[node("vm-w", "us-west1")], widen_at=NOW + timedelta(minutes=5))
    moved(store, "g-central", [], gang=[node("vm-c", REGION)], widen_at=NOW + timedelta(minutes=4))
    moved(store, "g-none", [], start_regions=["us-west1"], widen_at=NOW)  # narrowed, none claimed
    moved(store, "single", [], start_regions=["us-west1"], widen_at=NOW)
    with store.transaction() as tx:
        assert tx.gangs_assembling_in(CLUSTER, ["us-west1"], 10) == ["g-west"]
        assert tx.gangs_assembling_in(CLUSTER, [REGION, "us-west1"], 10) == ["g-central", "g-west"]
        assert tx.gangs_assembling_in(CLUSTER, [REGION, "us-west1"], 1) == ["g-central"]
        assert tx.gangs_assembling_in("other", ["us-west1"], 10) == []


def test_queued_jobs_allowed_a_region_without_their_tags_are_found_oldest_first(store):
    from zen.core.gang_records import GangNode

    def tagged(job_id: str, regions: list[str], tags: list[str] | None, **changes: Any) -> Job:
        request: dict[str, Any] = {"job_id": job_id, "command": ["true"]}
        return a_job(job_id, JobStatus.QUEUED, regions=regions, **changes,
                     request=request if tags is None else {**request, "requires_tags": tags})

    inserted(store, tagged("west", ["us-west1"], ["hipaa"]), tagged("both", [REGION, "us-west1"], ["hipaa"]),
             tagged("central", [REGION], ["hipaa"]), tagged("plain", ["us-west1"], None),
             tagged("none", ["us-west1"], []), tagged("two", [REGION], ["hipaa", "gpu-a"]),
             tagged("gang", ["us-west1"], ["hipaa"], nodes=2),
             a_job("held", regions=["us-west1"], request={"job_id": "held", "requires_tags": ["hipaa"]}))
    for second, job_id in enumerate(["central", "both", "two", "west", "plain", "none", "gang"]):
        moved(store, job_id, [], queued_at=NOW + timedelta(seconds=second))
    claimed = [GangNode(rank=0, vm="vm-w", region="us-west1", zone="us-west1-a", beat_at=NOW)]
    moved(store, "gang", [], gang=claimed, widen_at=NOW)  # a node claimed: it waits with its nodes
    carried = {REGION: ["hipaa"], "us-west1": ["gpu-a"]}
    with store.transaction() as tx:
        assert tx.queued_jobs_uncleared(CLUSTER, carried, 10) == ["both", "two", "west"]
        assert tx.queued_jobs_uncleared(CLUSTER, carried, 1) == ["both"]
        assert tx.queued_jobs_uncleared(CLUSTER, {**carried, "us-west1": ["hipaa"]}, 10) == ["two"]
        assert tx.queued_jobs_uncleared("other", carried, 10) == []
        # A region the configuration no longer gives the cluster carries no tag.
        assert tx.queued_jobs_uncleared(CLUSTER, {}, 10) == ["central", "both", "two", "west"]


def test_queued_jobs_of_higher_priority_are_found_highest_first_then_oldest(store):
    """What a claim reads to offer a VM a job of higher priority than the one it claims (zen.jobs.claims.outranked):
    one VM each, not offered to VMs now unless the offer is due to widen (the regions its start reaches: the
    caller's to check)."""
    def queued(job_id: str, priority: int, **changes: Any) -> Job:
        return a_job(job_id, JobStatus.QUEUED, priority=priority, **changes)

    inserted(store, queued("low", 0), queued("mid-old", 5), queued("mid-new", 5), queued("top", 9),
             queued("west", 9, regions=["us-west1"]), queued("narrowed", 9, regions=[REGION, "us-west1"]),
             queued("offered", 9), queued("offer-due", 7), queued("other", 9, cluster="other"),
             queued("gang", 9, nodes=2, request={"job_id": "gang", "command": ["true"], "nodes": 2}),
             a_job("pending", priority=9))
    for second, job_id in enumerate(["mid-old", "mid-new", "top", "low", "west", "narrowed", "offered", "offer-due",
                                     "other", "gang"]):
        moved(store, job_id, [], queued_at=NOW + timedelta(seconds=second))
    moved(store, "narrowed", [], start_regions=["us-west1"], widen_at=NOW + timedelta(minutes=1))
    moved(store, "offered", [], start_vms=["vm-x"], widen_at=NOW + timedelta(minutes=1))
    moved(store, "offer-due", [], start_vms=["vm-y"], widen_at=NOW - timedelta(seconds=1))
    with store.transaction() as tx:
        found = [job.job_id for job in tx.queued_jobs_outranking(CLUSTER, 0, "vm-a", NOW, 10)]
        assert found == ["top", "west", "narrowed", "offer-due", "mid-old", "mid-new"]
        assert [job.job_id for job in tx.queued_jobs_outranking(CLUSTER, 7, "vm-a", NOW, 10)] == ["top", "west",
                                                                                                  "narrowed"]
        assert [job.job_id for job in tx.queued_jobs_outranking(CLUSTER, 0, "vm-a", NOW, 1)] == ["top"]
        assert tx.queued_jobs_outranking(CLUSTER, 9, "vm-a", NOW, 10) == []
        assert tx.queued_jobs_outranking("other", 0, "vm-a", NOW, 10)[0].job_id == "other"
        # Offered to this VM: found (it is offered again at its next claim), and held where another unit holds it.
        assert "offered" in [job.job_id for job in tx.queued_jobs_outranking(CLUSTER, 0, "vm-x", NOW, 10)]
        assert tx.lock_job_unless_held("top").job_id == "top" and tx.lock_job_unless_held("nothing") is None


def test_the_tick_clock_sees_a_gap_in_the_ticks(store):
    with store.transaction() as tx:
        assert tx.record_tick(NOW, 60.0) is None
        assert tx.record_tick(NOW + timedelta(seconds=30), 60.0) is None
        assert tx.record_tick(NOW + timedelta(seconds=60), 60.0) is None
        back = NOW + timedelta(seconds=300)
        assert tx.record_tick(back, 60.0) == back  # 240 s without a tick: Zen may have been down
        assert tx.record_tick(back + timedelta(seconds=30), 60.0) == back


def test_the_tick_clock_keeps_the_heartbeat_paths_probe(store):
    """(back_at, publish, late, seen, sent_at, vouched_at): a probe heard vouches for the path up to when it was
    sent, however late it came; an unheard one is replaced after ``stale_s`` (here 120 s), kept as the previous one."""
    at = lambda s: NOW + timedelta(seconds=s)  # noqa: E731
    with store.transaction() as tx:
        tx.record_tick(at(0), 60.0)
        assert tx.look_at_probe(at(0), 15.0, 120.0, "a" * 32)[:6] == (None, True, False, False, None, None)
        assert tx.probe_heard("b" * 32, at(1)) is None  # not the last one sent
        assert tx.probe_heard("a" * 32, at(2)) == 2.0 and tx.probe_heard("a" * 32, at(3)) is None
        tx.record_tick(at(60), 60.0)
        assert tx.look_at_probe(at(60), 15.0, 120.0, "c" * 32)[:6] == (None, True, False, True, at(0), at(0))
        tx.record_tick(at(70), 60.0)
        assert tx.look_at_probe(at(70), 15.0, 120.0, "d" * 32)[:6] == (None, False, False, True, at(60), at(0))
        tx.record_tick(at(120), 60.0)  # unheard past the margin: late, said; not replaced yet
        assert tx.look_at_probe(at(120), 15.0, 120.0, "e" * 32)[:6] == (None, False, True, True, at(60), at(0))
        assert tx.probe_heard("c" * 32, at(150)) == 90.0  # heard late: the path delivered what was sent by 60
        tx.record_tick(at(180), 60.0)
        assert tx.look_at_probe(at(180), 15.0, 120.0, "f" * 32)[:6] == (None, True, False, True, at(60), at(60))
        tx.probe_unsent("f" * 32)  # its publish failed (or seemed to): it vouches nothing, no probe if it comes
        assert tx.probe_heard("f" * 32, at(200)) is None
        tx.record_tick(at(240), 60.0)
        assert tx.look_at_probe(at(240), 15.0, 120.0, "g" * 32)[:6] == (None, True, False, True, None, at(60))
        tx.record_tick(at(300), 60.0)
        assert tx.look_at_probe(at(300), 15.0, 120.0, "h" * 32)[:2] == (None, False)  # g unheard: kept
        tx.record_tick(at(361), 60.0)  # g replaced unheard, kept as the previous probe
        assert tx.look_at_probe(at(361), 15.0, 120.0, "i" * 32)[:6] == (None, True, True, True, at(240), at(60))
        tx.probe_unsent("i" * 32)  # not published either
        tx.record_tick(at(420), 60.0)
        assert tx.look_at_probe(at(420), 15.0, 120.0, "j" * 32)[:6] == (None, True, False, True, None, at(60))
        assert tx.probe_heard("g" * 32, at(430)) == 190.0  # g after all: the path delivered what was sent by 240
        assert tx.probe_heard("g" * 32, at(431)) is None and tx.probe_heard("j" * 32, at(432)) == 12.0
        tx.record_tick(at(480), 60.0)
        assert tx.look_at_probe(at(480), 15.0, 120.0, "k" * 32)[4:6] == (at(420), at(420))


def test_a_probe_heard_after_the_path_stalled_restarts_silences(store):
    """A probe heard while one replaced unheard is outstanding (either of them): the path stalled ``stale_s``, its
    backlog comes back in no order, so silences count afresh from then (back_at), as after a gap in the ticks."""
    at = lambda s: NOW + timedelta(seconds=s)  # noqa: E731
    with store.transaction() as tx:
        tx.record_tick(at(0), 60.0)
        tx.look_at_probe(at(0), 15.0, 120.0, "a" * 32)
        assert tx.probe_heard("a" * 32, at(1)) == 1.0
        for t, nonce in ((60, "b"), (120, "x"), (180, "y")):  # b unheard from 60
            tx.record_tick(at(t), 60.0)
            tx.look_at_probe(at(t), 15.0, 120.0, nonce * 32)
        tx.record_tick(at(181), 60.0)  # b replaced unheard by c, kept as the previous probe
        assert tx.look_at_probe(at(181), 15.0, 120.0, "c" * 32)[:2] == (None, True)
        assert tx.probe_heard("c" * 32, at(200)) == 19.0  # c first: the path stalled
        tx.record_tick(at(240), 60.0)
        assert tx.look_at_probe(at(240), 15.0, 120.0, "d" * 32)[:6] == (at(200), True, False, True, at(181), at(181))
        assert tx.probe_heard("b" * 32, at(241)) is None  # b after it: cleared, a duplicate
        assert tx.probe_heard("d" * 32, at(242)) == 2.0  # prompt, none replaced outstanding: back_at stays
        tx.record_tick(at(300), 60.0)
        assert tx.look_at_probe(at(300), 15.0, 120.0, "e" * 32)[:6] == (at(200), True, False, True, at(240), at(240))


def test_the_tick_clock_keeps_the_largest_recent_delivery_lag(store):
    """A report through late (zen.jobs.probes.heard_late): its lag kept when above the one kept, or that one is
    older than fresh_s (replaced, so the hold follows a falling lag), or was seen more than fresh_s later (the clock
    stepped back). Seen less later, it is another request's, begun after this one and written first: kept."""
    at = lambda s: NOW + timedelta(seconds=s)  # noqa: E731
    with store.transaction() as tx:
        tx.heard_late(40.0, at(0), 60.0)  # no tick yet: no row, nothing
        tx.record_tick(at(0), 60.0)
        assert tx.look_at_probe(at(0), 15.0, 120.0, "a" * 32)[6:] == (None, None)
        tx.heard_late(40.0, at(10), 60.0)
        tx.heard_late(30.0, at(20), 60.0)  # below the one kept: not written
        assert tx.look_at_probe(at(30), 15.0, 120.0, "b" * 32)[6:] == (40.0, at(10))
        tx.heard_late(50.0, at(40), 60.0)
        tx.heard_late(20.0, at(101), 60.0)  # the one kept is older than fresh_s: replaced
        assert tx.look_at_probe(at(110), 15.0, 120.0, "c" * 32)[6:] == (20.0, at(101))
        tx.heard_late(16.0, at(90), 60.0)  # a push got before the kept one's, handled after it: not written
        assert tx.look_at_probe(at(110), 15.0, 120.0, "d" * 32)[6:] == (20.0, at(101))
        tx.heard_late(16.0, at(30), 60.0)  # seen fresh_s and more before the one kept: the clock stepped back
        assert tx.look_at_probe(at(110), 15.0, 120.0, "e" * 32)[6:] == (16.0, at(30))


def test_an_outage_teaches_the_tick_clock_no_schedule_that_hides_the_next(store):
    """Ticks a minute apart, a ten-minute outage, five healthy minutes, then a three-minute outage: a gap
    (learnt whole, the first outage's 600 s made the second no gap for a quarter of an hour)."""
    at = NOW
    with store.transaction() as tx:
        for _ in range(4):
            tx.record_tick(at, 60.0)
            at += timedelta(seconds=60)
        at += timedelta(seconds=540)
        assert tx.record_tick(at, 60.0) == at
        for _ in range(5):
            at += timedelta(seconds=60)
            tx.record_tick(at, 60.0)
        at += timedelta(seconds=180)
        assert tx.record_tick(at, 60.0) == at
        for _ in range(3):  # a schedule slow all along is learnt: three-minute ticks are soon no gap
            at += timedelta(seconds=180)
            last = tx.record_tick(at, 60.0)
        assert last < at


def test_one_tick_holds_the_lock_at_a_time(store):
    with store.tick_lock(7) as first:
        assert first
        with store.tick_lock(7) as second:
            assert not second
    with store.tick_lock(7) as again:
        assert again


def test_quota_on_its_way_back_is_a_stopped_or_preempted_jobs_not_a_gang_requeued_for_a_lost_node(store):
    """A gang stopping because it lost a node is requeued holding its quota: counted as freeing, a head was kept
    room for GPUs that never came back."""
    inserted(store, *(a_job(j, JobStatus.QUEUED, queue="q") for j in ("user", "queue", "gang")))
    for job_id, fields in (("user", {"stop_reason": "enough"}), ("queue", {"preempted_by": "job p"}), ("gang", {})):
        moved(store, job_id, [JobStatus.ASSIGNED, JobStatus.RUNNING, JobStatus.STOPPING], vm=f"vm-{job_id}", **fields)
    with store.transaction() as tx:
        assert tx.admitted(["q"], CLUSTER) == [{"queue": "q", "gpus": 12, "jobs": 3, "freeing": 8}]


def test_admission_reads_the_line_and_the_quota_held(store):
    inserted(store, a_job("p1", queue="q"), a_job("p2", queue="q", priority=5, at=NOW + timedelta(seconds=1)),
             a_job("big", queue="q", gpus=8, at=NOW + timedelta(seconds=2)),
             a_job("a1", JobStatus.QUEUED, queue="q"), a_job("s1", JobStatus.QUEUED, queue="q"),
             a_job("other", queue="r"))
    moved(store, "s1", [JobStatus.ASSIGNED, JobStatus.RUNNING, JobStatus.STOPPING], vm="vm-s", stop_reason="enough")
    with store.transaction() as tx:
        tx.queue_lock("queue:q")
        assert [j.job_id for j in tx.pending_of_queue("q", CLUSTER, 10, 4)] == ["p2", "p1"]
        assert [j.job_id for j in tx.pending_of_queue("q", CLUSTER, 1, 8)] == ["p2"]
        assert tx.admitted(["q"], CLUSTER) == [{"queue": "q", "gpus": 8, "jobs": 2, "freeing": 4}]
        assert tx.admitted(["r"], CLUSTER) == []
        assert sorted(tx.waiting_queues()) == [("q", CLUSTER), ("r", CLUSTER)]
        assert [tx.jobs_ahead(tx.get_job(j), 8) for j in ("p2", "p1", "big")] == [0, 1, 2]
        last = a_job("last", queue="q", at=NOW + timedelta(seconds=3))
        assert (tx.jobs_ahead(last, 8), tx.jobs_ahead(last, 4)) == (3, 2)  # big can no longer be held: not ahead
        assert tx.queue_head("q", CLUSTER, 8) == ("p2", 4) and tx.queue_head("r", CLUSTER, 8) == ("other", 4)
        assert tx.queue_head("q", CLUSTER, 0) is None
        assert [j.job_id for j in tx.preemption_candidates(["q"], CLUSTER, 10)] == ["a1"]
        tx.save_queue_usage("q", CLUSTER, 120.0, NOW)
        assert tx.queue_usage(["q", "r"]) == {("q", CLUSTER): (120.0, NOW)}
        counts = {(r["queue"], r["cluster"]): r for r in tx.queue_counts()}
    assert {k: v for k, v in counts[("q", CLUSTER)].items() if k not in ("queue", "cluster")} == {
        "pending": 3, "admitted_waiting": 1, "running": 1, "admitted_gpus": 8}


def test_an_attempt_is_used_from_its_claim_counted_once_and_a_lost_one_can_be_told_its_outcome(store):
    claimed = NOW + timedelta(seconds=10)
    inserted(store, a_job("j1", JobStatus.QUEUED))
    job = moved(store, "j1", [JobStatus.ASSIGNED], claimed, vm="vm-a", region=REGION)
    with store.transaction() as tx:
        tx.add_job_events([event("j1", "ASSIGNED", claimed, frm="QUEUED")])
        assert tx.record_attempt(job, outcome="LOST", machine_type="a2-highgpu-4g", gpus=4, ran_from=None,
                                 now=NOW + timedelta(seconds=70))
        assert not tx.record_attempt(job, outcome="SUCCEEDED", machine_type=None, gpus=4, ran_from=None,
                                     now=NOW + timedelta(seconds=80))
        assert tx.lost_attempt("j1", 1) == {"vm": "vm-a", "started_at": claimed, "outcome": "LOST",
                                            "by_sweep": False, "later_held": False, "unspent": False}
        tx.add_job_events([event("j1", "LOST", NOW + timedelta(seconds=70), actor="sweep", frm="ASSIGNED")])
        assert tx.lost_attempt("j1", 1)["by_sweep"] and not tx.lost_attempt("j1", 1)["unspent"]
        tx.add_job_events([{**event("j1", "LOST", NOW + timedelta(seconds=70), actor="sweep", frm="ASSIGNED"),
                            "reason": "no heartbeat from vm-a for 120s, ... taken as preempted (no attempt spent)"}])
        assert tx.lost_attempt("j1", 1)["unspent"]  # the cloud's, requeued unspent (zen.jobs.cloud_silence)
        assert tx.record_late_outcome("j1", 1, "SUCCEEDED")
        assert not tx.record_late_outcome("j1", 1, "SUCCEEDED")
        assert tx.lost_attempt("j1", 1) is None


def test_a_repeated_refusal_counts_on_one_row_and_old_ones_are_pruned(store):
    key = repeat_key("vm-a", "j1", 1, "draining")
    with store.transaction() as tx:
        assert tx.record_rejection(source="hb", message_id="m1", job_id="j1", reason="bad", payload=b"{}", now=NOW)
        assert not tx.record_rejection(source="hb", message_id="m1", job_id="j1", reason="bad", payload=b"{}", now=NOW)
        assert tx.record_rejection(source="hb", message_id="m2", job_id="j1", reason="drained", payload=b"{}",
                                   now=NOW, key=key)
        assert not tx.record_rejection(source="hb", message_id="m3", job_id="j1", reason="drained", payload=b"{}",
                                       now=NOW + timedelta(seconds=5), key=key)
        assert tx.rejection_last_seen("hb", key) == NOW + timedelta(seconds=5)
        assert tx.rejection_last_seen("hb", "another") is None
    assert store.prune_rejections(NOW + timedelta(days=7, seconds=1)) == 1  # m1; the key's row was seen later
    assert store.prune_rejections(NOW + timedelta(days=8)) == 1


def test_a_vm_row_takes_only_newer_heartbeats_and_a_claim_sees_its_drain_and_its_jobs(store, seed):
    beat = dict(cluster=CLUSTER, region=REGION, zone=f"{REGION}-a", job_id=None, attempt=None, sent_at=NOW, now=NOW)
    with store.transaction() as tx:
        assert tx.upsert_vm(name="vm-a", state="BUSY", seq=5, **beat) == ""
        assert tx.upsert_vm(name="vm-a", state="IDLE", seq=4, **beat) is None  # older, delivered late
        assert tx.upsert_vm(name="vm-a", state="IDLE", seq=6, **beat) == "BUSY"
        assert not tx.vm_is_draining("vm-a", 6)
        assert tx.upsert_vm(name="vm-a", state="RETIRED", seq=7, **beat | {"now": NOW + timedelta(hours=1)}) == "IDLE"
        assert tx.vm_is_draining("vm-a", 6)  # a claim drawn before its agent retired
        assert not tx.vm_is_draining("vm-a", 8)  # drawn after: a new agent's (a RETIRED one claims no more)
        made = NOW - timedelta(days=1)  # the VM's creation, its token's: the RETIRED kept for it, older or not
        assert tx.upsert_vm(name="vm-a", state="RETIRED", seq=7, created=made, **beat) is None
        assert tx.upsert_vm(name="vm-a", state="IDLE", seq=9, created=made, **beat) == "RETIRED"  # restarted, forgot
        assert tx.vm_is_draining("vm-a", 8)  # recorded RETIRED still: no idle VM to a scaling pass, deleted as retired
        assert tx.vm_retired_before("vm-a", made) and not tx.vm_retired_before("vm-a", NOW)  # NOW: its MIG's new VM
        assert not tx.vm_retired_before("vm-a", None) and not tx.vm_retired_before("vm-z", made)
        assert tx.vm_run_marks("vm-a") == (NOW, None) and tx.vm_run_marks("vm-z") == (None, None)  # its first word's
    with pytest.raises(DataRejected), store.transaction() as tx:  # the states a VM reports, and no other
        tx.upsert_vm(name="vm-x", state="BOOTING", seq=1, **beat)
    seed.drain_vm("vm-b")
    inserted(store, a_job("j1", JobStatus.QUEUED), a_job("j2", JobStatus.QUEUED, gpus=2))
    moved(store, "j1", [JobStatus.ASSIGNED], vm="vm-b")
    moved(store, "j2", [JobStatus.ASSIGNED, JobStatus.RUNNING], vm="vm-b")
    with store.transaction() as tx:
        assert tx.vm_is_draining("vm-b", 1) and not tx.vm_is_draining("vm-c", 1)
        assert tx.jobs_on_vm("vm-b") == {"j1": 4, "j2": 2} and tx.jobs_on_vm("vm-c") == {}


def test_warm_vms_are_idle_recent_free_and_undrained_and_stockouts_block_regions(store, seed):
    warm = dict(cluster=CLUSTER, region=REGION, zone=f"{REGION}-a", state="IDLE", job_id=None, attempt=None, seq=1,
                sent_at=NOW, cached_inputs=["gs://b/x", "gs://b/y"], images=["img:1"])
    with store.transaction() as tx:
        tx.upsert_vm(name="vm-old", now=NOW - timedelta(minutes=10), **warm)
        tx.upsert_vm(name="vm-a", now=NOW - timedelta(seconds=20), **warm)
        tx.upsert_vm(name="vm-b", now=NOW - timedelta(seconds=10), **warm)
        tx.upsert_vm(name="vm-c", now=NOW, **{**warm, "region": "europe-west4"})
    later = NOW + timedelta(seconds=5)
    with store.transaction() as tx:
        assert tx.vms_holding(CLUSTER, [REGION], ["gs://b/x"], None, later) == [
            ("vm-b", REGION, False, None), ("vm-a", REGION, False, None)]  # the most recently heard from first
        assert tx.vms_holding(CLUSTER, [REGION], [], "img:1", later, limit=1) == [("vm-b", REGION, False, None)]
        assert tx.vms_holding(CLUSTER, [REGION], ["gs://b/z"], "img:2", later) == []
        assert tx.vms_holding(CLUSTER, [REGION], [], None, later) == []
    seed.drain_vm("vm-b")
    inserted(store, a_job("offer", JobStatus.QUEUED))
    moved(store, "offer", [], start_vms=["vm-a"])
    with store.transaction() as tx:
        assert tx.vms_holding(CLUSTER, [REGION], ["gs://b/x"], None, later) == [("vm-a", REGION, True, None)]
        assert tx.blocked_regions(CLUSTER, NOW) == set()
    seed.block_region(CLUSTER, REGION, NOW + timedelta(minutes=10))
    with store.transaction() as tx:
        assert tx.blocked_regions(CLUSTER, NOW) == {REGION}
        assert tx.blocked_regions(CLUSTER, NOW + timedelta(minutes=11)) == set()
    seed.block_region(CLUSTER, REGION, NOW + timedelta(minutes=10), found_at=NOW)
    with store.transaction() as tx:  # with since: also where a stockout was found after then
        later = NOW + timedelta(minutes=11)
        assert tx.blocked_regions(CLUSTER, later, since=NOW - timedelta(minutes=1)) == {REGION}
        assert tx.blocked_regions(CLUSTER, later, since=NOW) == set()
    seed.block_region(CLUSTER, REGION, NOW + timedelta(minutes=10), found_at=NOW, booted_at=NOW + timedelta(minutes=1))
    with store.transaction() as tx:  # a VM booted there after the stockout: over
        assert tx.blocked_regions(CLUSTER, NOW + timedelta(minutes=11), since=NOW - timedelta(minutes=1)) == set()


def test_the_planners_room_for_gangs_is_read_per_pool(store, seed):
    with store.transaction() as tx:
        assert tx.gang_rooms(CLUSTER) == {}
    later = NOW + timedelta(seconds=2)
    seed.room_for_gangs(CLUSTER, REGION, 3)
    seed.room_for_gangs(CLUSTER, f"{REGION}/spot", 0, later)
    seed.room_for_gangs("other-cluster", REGION, 5)
    with store.transaction() as tx:  # each with when the pass that measured it read the fleet
        assert tx.gang_rooms(CLUSTER) == {REGION: (3, NOW), f"{REGION}/spot": (0, later)}


def test_a_gangs_nodes_in_flight_add_to_the_room_of_their_region(store, seed):
    """A VM whose agent said BUSY with an assembling gang's attempt, not yet a node of it, is on its way into it
    (migration 0057's ``gang_node_in_flight``): it adds to the room the planner measured where it is. Not one of
    the gang's nodes, one naming another attempt, one in another region than the gang's first node, nor a drained one."""
    from zen.core.gang_records import GangNode

    seed.room_for_gangs(CLUSTER, REGION, 0)
    node = GangNode(rank=0, vm="vm-a", region=REGION, zone=f"{REGION}-a", beat_at=NOW)
    inserted(store, a_job("pair", JobStatus.QUEUED, nodes=3, regions=[REGION, "us-west1"],
                          request={"job_id": "pair", "command": ["true"], "nodes": 3}))
    moved(store, "pair", [], gang=[node])  # node 0 claimed
    beat = dict(cluster=CLUSTER, zone=f"{REGION}-a", state="BUSY", job_id="pair", seq=1, sent_at=NOW, now=NOW)
    with store.transaction() as tx:
        for name, region, attempt in [("vm-a", REGION, 1), ("vm-b", REGION, 1), ("vm-c", REGION, 1),
                                       ("vm-d", REGION, 2), ("vm-e", "us-west1", 1)]:
            tx.upsert_vm(name=name, region=region, attempt=attempt, **beat)
    seed.drain_vm("vm-c")
    with store.transaction() as tx:
        assert tx.gang_rooms(CLUSTER) == {REGION: (1, NOW)}  # vm-b alone


def test_hooks_inject_the_next_error_once_and_run_around_an_operation(store):
    seen: list[tuple[str, Any]] = []
    store.hooks.fail_next("insert_job", TransientError("Postgres is unavailable"))
    with pytest.raises(TransientError), store.transaction() as tx:
        tx.remember_early_stop("j0", "stop", NOW)
        tx.insert_job(a_job("j1"))
    store.hooks.before("insert_job", lambda job: seen.append(("before", job.job_id)))
    store.hooks.after("insert_job", lambda written, job: seen.append(("after", written)))
    inserted(store, a_job("j1"))  # the error was for the next call only
    with store.transaction() as tx:
        assert tx.take_early_stops("j0") == []  # the failed unit rolled back
    assert seen == [("before", "j1"), ("after", True)]


def test_the_job_service_imports_no_store_adapter():
    """``zen.jobs`` talks to the port only; ``zen.app`` wires the Postgres adapter in."""
    code = ("import sys, zen.jobs.service, zen.jobs.messaging, zen.jobs.sweeps, zen.jobs.vm_beats; "
            "print(','.join(sorted(m for m in sys.modules if m.startswith(('zen.store', 'zen_dev', 'pg8000')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_queued_jobs_short_of_a_region_added_since_are_found_oldest_first(store):
    """Jobs whose request named no regions, not allowed one the cluster has now with the tags they require: widened to
    it by the tick (``zen.jobs.claims.recleared``). A job that named its regions, or allowed every one, is not read."""
    def queued(job_id: str, allowed: list[str], asked: dict[str, Any] | None = None, **changes: Any) -> Job:
        request = {"job_id": job_id, "command": ["true"], **(asked or {})}
        return a_job(job_id, JobStatus.QUEUED, regions=allowed, request=request, **changes)

    inserted(store, queued("all", [REGION, "us-west1"]), queued("short", [REGION]),
             queued("null", [REGION], {"regions": None}), queued("pinned", [REGION], {"regions": [REGION]}),
             queued("tagged", [REGION], {"requires_tags": ["hipaa"]}), queued("nodes", [REGION], nodes=2))
    for second, job_id in enumerate(["tagged", "null", "short", "all", "pinned", "nodes"]):
        moved(store, job_id, [], queued_at=NOW + timedelta(seconds=second))
    with store.transaction() as tx:
        assert tx.queued_jobs_short(CLUSTER, {REGION: [], "us-west1": []}, 10) == ["null", "short", "nodes"]
        assert tx.queued_jobs_short(CLUSTER, {REGION: [], "us-west1": []}, 1) == ["null"]
        assert tx.queued_jobs_short(CLUSTER, {REGION: ["hipaa"], "us-west1": ["hipaa"]}, 10) == [
            "tagged", "null", "short", "nodes"]
        assert tx.queued_jobs_short(CLUSTER, {REGION: []}, 10) == []
        assert tx.queued_jobs_short("other", {REGION: [], "us-west1": []}, 10) == []
