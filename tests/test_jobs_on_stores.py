"""The job service (submit, heartbeat, stop, the tick's sweeps) on both job stores: the in-memory fake
(``zen_dev.fakes.jobstore``, microseconds a message) and the Postgres adapter, with the same cases; and
races and errors injected through the fake's hooks rather than by patching modules."""

from __future__ import annotations

import itertools
import json
from typing import Any, Iterator

import pytest

from tests.messages import heartbeat, job_request
from zen.core.clock import ManualClock
from zen.core.config import ZenConfig
from zen.core.errors import TransientError
from zen.core.events import PubSubEnvelope
from zen.core.models import Job
from zen.jobs.messaging import OutboxRelay
from zen.jobs.service import JobService, Outcome
from zen.jobs.store import JobStore
from zen_dev.fakes.jobstore import InMemoryJobStore
from zen_dev.fakes.publisher import RecordingPublisher


class Jobs:
    """The job service on ``store`` as ``zen.app.Zen`` wires it, minus scaling and the schema check."""

    def __init__(self, store: JobStore, config: ZenConfig, clock: ManualClock):
        self.store, self.config, self.clock = store, config, clock
        self.publisher = RecordingPublisher()
        self.relay = OutboxRelay(store, self.publisher, clock,
                                 urgent=frozenset({config.topics.job_start, config.topics.vm_control}))
        self.service = JobService(store, config, self.relay, clock)
        self._ids = itertools.count(1)

    def _envelope(self, payload: dict[str, Any]) -> PubSubEnvelope:
        return PubSubEnvelope(message_id=f"m-{next(self._ids)}", data=json.dumps(payload).encode(),
                              publish_time=self.clock())

    def submit(self, payload: dict[str, Any]) -> Outcome:
        with self.relay.request():
            return self.service.submit(self._envelope(payload))

    def heartbeat(self, payload: dict[str, Any]) -> Outcome:
        with self.relay.request():
            return self.service.heartbeat(self._envelope(payload))

    def stop(self, payload: dict[str, Any]) -> Outcome:
        with self.relay.request():
            return self.service.stop(self._envelope(payload))

    def tick(self) -> dict[str, int]:
        """The job service's part of ``Zen.on_scale_tick``."""
        with self.relay.request(), self.store.tick_lock(1) as locked:
            assert locked
            sweeps = self.service.sweeps
            return {"relayed": self.relay.flush_pending(), "swept": sweeps.sweep_lost(),
                    "stopped": sweeps.apply_early_stops(), "republished": sweeps.republish_unclaimed(),
                    "admitted": self.service.sweeps.admit_waiting()}

    def job(self, job_id: str) -> Job:
        with self.store.transaction() as tx:
            job = tx.get_job(job_id)
        assert job is not None
        return job

    def status(self, job_id: str) -> tuple[str, int]:
        job = self.job(job_id)
        return job.status.value, job.attempt

    def history(self, job_id: str) -> list[tuple[str | None, str]]:
        with self.store.transaction() as tx:
            return [(r["from_status"], r["to_status"]) for r in tx.job_history(job_id)]

    def controls(self, vm: str) -> list[dict[str, Any]]:
        return [m for m in map(lambda m: json.loads(m.data), self.publisher.on(self.config.topics.vm_control))
                if m["vm"] == vm]

    def orders(self, vm: str) -> list[str]:
        return [m["action"] for m in self.controls(vm)]

    def stop_reasons(self, vm: str) -> list[str]:
        return [m["reason"] for m in self.controls(vm) if m["action"] == "STOP"]

    def starts(self, job_id: str) -> list[int]:
        return [json.loads(m.data)["attempt"] for m in self.publisher.on(self.config.topics.job_start)
                if m.attributes.get("job_id") == job_id]


@pytest.fixture(params=["memory", "postgres"])
def jobs(request: pytest.FixtureRequest, config: ZenConfig, clock: ManualClock) -> Iterator[Jobs]:
    if request.param == "memory":
        store: JobStore = InMemoryJobStore()
    else:
        from zen.store.jobstore import PostgresJobStore

        store = PostgresJobStore(request.getfixturevalue("db"))
    yield Jobs(store, config, clock)


@pytest.fixture
def fake(config: ZenConfig, clock: ManualClock) -> Jobs:
    return Jobs(InMemoryJobStore(), config, clock)


def test_a_submission_is_queued_once_and_its_start_published_once(jobs):
    assert jobs.submit(job_request("job-1")).result == "created"
    assert jobs.submit(job_request("job-1")).result == "duplicate"
    assert jobs.submit(job_request("job-1", command=["other"])).result == "rejected"  # the id is taken
    assert jobs.status("job-1") == ("QUEUED", 1)
    assert jobs.history("job-1") == [(None, "PENDING"), ("PENDING", "QUEUED")]
    assert jobs.starts("job-1") == [1]


def test_a_job_runs_to_its_end_on_the_vm_whose_claim_won(jobs):
    jobs.submit(job_request("job-1"))
    assert jobs.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a")).result == "applied"
    jobs.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-b"))  # a second copy of the start, claimed
    assert jobs.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a")).result == "applied"
    assert jobs.heartbeat(heartbeat("job-1", "RUNNING", 2, vm="vm-a")).result == "duplicate"
    jobs.heartbeat(heartbeat("job-1", "SUCCEEDED", 3, vm="vm-a", exit_code=0))
    assert jobs.status("job-1") == ("SUCCEEDED", 1)
    assert jobs.history("job-1")[2:] == [("QUEUED", "ASSIGNED"), ("ASSIGNED", "RUNNING"), ("RUNNING", "SUCCEEDED")]
    assert jobs.orders("vm-a") == ["CONFIRM"] and jobs.orders("vm-b") == ["RELEASE"]


def test_a_stop_reaches_the_vm_and_its_answer_ends_the_job(jobs):
    jobs.submit(job_request("job-1"))
    jobs.heartbeat(heartbeat("job-1", "CLAIMED", 1))
    jobs.heartbeat(heartbeat("job-1", "RUNNING", 2))
    assert jobs.stop({"job_id": "job-1", "reason": "enough"}).result == "applied"
    assert jobs.status("job-1") == ("STOPPING", 1)
    jobs.heartbeat(heartbeat("job-1", "STOPPED", 3))
    assert jobs.status("job-1") == ("CANCELLED", 1)
    assert jobs.orders("vm-a") == ["CONFIRM", "STOP"]


def test_a_stop_told_again_carries_the_users_reason(jobs):
    """A VM that still reports the attempt while it stops is told again, with the reason the user gave
    (the agent's message on the job quotes the order it acts on, which may be the repeat)."""
    jobs.submit(job_request("job-1"))
    jobs.heartbeat(heartbeat("job-1", "CLAIMED", 1))
    jobs.heartbeat(heartbeat("job-1", "RUNNING", 2))
    jobs.stop({"job_id": "job-1", "reason": "wrong learning rate"})
    jobs.heartbeat(heartbeat("job-1", "RUNNING", 3))  # sent before the stop reached the VM
    jobs.heartbeat(heartbeat("job-1", "CLAIMED", 1))  # a redelivered claim of the attempt
    assert jobs.stop_reasons("vm-a") == ["wrong learning rate"] * 3
    assert jobs.job("job-1").stop_reason == "wrong learning rate"


def test_a_users_stop_during_a_preemption_is_the_reason_told_again(fake):
    """A job stopping for a preemption is told again with the preemption's reason; once its user stops
    it too, with the user's, at once (the shorter wait: silence.stop_left_s) and at each report after (the
    user's stop wins: it ends CANCELLED)."""
    from zen.core.models import JobStatus

    fake.submit(job_request("job-1"))
    fake.heartbeat(heartbeat("job-1", "CLAIMED", 1))
    fake.heartbeat(heartbeat("job-1", "RUNNING", 2))
    fake.store.put_job(fake.job("job-1").model_copy(update={"status": JobStatus.STOPPING, "preempted_by": "queue ml"}))
    fake.heartbeat(heartbeat("job-1", "RUNNING", 3))
    fake.stop({"job_id": "job-1", "reason": "not needed"})
    fake.heartbeat(heartbeat("job-1", "RUNNING", 4))
    assert fake.stop_reasons("vm-a") == ["preempted: queue ml", "not needed", "not needed"]
    fake.heartbeat(heartbeat("job-1", "STOPPED", 5))
    assert fake.status("job-1") == ("CANCELLED", 1)


def test_a_stop_that_comes_before_its_job_cancels_it_on_arrival(jobs):
    assert jobs.stop({"job_id": "job-1", "reason": "changed my mind"}).result == "rejected"  # unknown, kept
    jobs.submit(job_request("job-1"))
    assert jobs.status("job-1") == ("CANCELLED", 1)
    assert jobs.history("job-1") == [(None, "PENDING"), ("PENDING", "CANCELLED")]
    assert jobs.starts("job-1") == []


def test_the_sweep_requeues_a_silent_vms_job_and_the_tick_republishes_an_unclaimed_start(jobs):
    jobs.submit(job_request("job-1"))
    jobs.submit(job_request("job-2"))
    jobs.heartbeat(heartbeat("job-1", "CLAIMED", 1))
    jobs.heartbeat(heartbeat("job-1", "RUNNING", 2))
    jobs.tick()
    jobs.clock.advance(jobs.config.deadlines.heartbeat_timeout_s + 1)
    assert jobs.tick()["swept"] == 1
    assert jobs.status("job-1") == ("QUEUED", 2)
    assert jobs.history("job-1")[-2:] == [("RUNNING", "LOST"), ("LOST", "QUEUED")]
    assert jobs.starts("job-1") == [1, 2] and jobs.orders("vm-a") == ["CONFIRM", "STOP"]
    jobs.clock.advance(jobs.config.deadlines.start_republish_s + 1)
    assert jobs.tick()["republished"] == 2
    assert jobs.starts("job-2") == [1, 1]


def test_a_vm_heartbeat_is_recorded_once_and_an_older_one_changes_nothing(jobs):
    def vm_beat(state: str, seq: int) -> dict[str, Any]:
        return {"kind": "vm", "vm": "vm-a", "cluster": "4xa100-40gb", "region": "us-central1",
                "zone": "us-central1-a", "state": state, "seq": seq, "sent_at": "2026-01-01T00:00:00Z"}

    assert jobs.heartbeat(vm_beat("BUSY", 200)).result == "applied"
    assert jobs.heartbeat(vm_beat("IDLE", 100)).result == "duplicate"
    assert jobs.heartbeat({**vm_beat("IDLE", 300), "cluster": "nope"}).result == "rejected"


# -- races and errors, injected through the fake ---------------------------------------------------------

def test_a_stop_that_races_its_submission_is_applied_once_kept(fake, config, clock):
    """The stop finds no job; before it commits, a submission elsewhere commits without seeing the kept
    stop (in Postgres: two transactions, each missing the other's row). The fake's hook writes that
    submission's row, made by another job service, at that point: the stop, once kept, looks again."""
    elsewhere = Jobs(InMemoryJobStore(), config, clock)
    elsewhere.submit(job_request("job-1"))
    fake.store.hooks.after("remember_early_stop", lambda _, job_id, reason, now, principal=None: fake.store.put_job(
        elsewhere.job(job_id)))
    fake.stop({"job_id": "job-1", "reason": "changed my mind"})
    assert fake.status("job-1") == ("CANCELLED", 1)
    with fake.store.transaction() as tx:
        assert tx.take_early_stops("job-1") == []  # consumed


def test_a_database_fault_mid_change_is_redelivered_and_then_applies_once(fake):
    fake.submit(job_request("job-1"))
    fake.store.hooks.fail_next("save_job", TransientError("Postgres is unavailable"))
    with pytest.raises(TransientError):  # Pub/Sub redelivers
        fake.heartbeat(heartbeat("job-1", "CLAIMED", 1))
    assert fake.status("job-1") == ("QUEUED", 1) and fake.orders("vm-a") == []  # rolled back, nothing sent
    assert fake.heartbeat(heartbeat("job-1", "CLAIMED", 1)).result == "applied"  # the redelivery
    assert fake.status("job-1") == ("ASSIGNED", 1) and fake.orders("vm-a") == ["CONFIRM"]


def test_a_publish_that_fails_after_commit_is_resent_by_the_tick(fake):
    fake.publisher.fail_next(RuntimeError("Pub/Sub is unavailable"), topic=fake.config.topics.job_start)
    fake.submit(job_request("job-1"))
    assert fake.status("job-1") == ("QUEUED", 1) and fake.starts("job-1") == []
    assert fake.tick()["relayed"] >= 1
    assert fake.starts("job-1") == [1]


def test_a_second_tick_waits_for_the_first(fake):
    with fake.store.tick_lock(1) as first:
        assert first
        with fake.store.tick_lock(1) as second:
            assert not second
