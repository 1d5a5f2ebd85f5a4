"""An attempt is not taken for lost while its agent's fence, computed from the configuration its VM booted with,
may still be up (``zen.core.lease.attempt_deadlines``). A VM reads ``deadlines.heartbeat_timeout_s`` when it boots:
after an operator lowered it (300 s to 120 s), the lost-job sweep requeued an attempt 120 s after its VM went
silent, while that VM, cut off from Zen (a hung network, a hung heartbeat path), ran the job until its fence fell
near 300 s: the job ran twice at once. The agent now says in its reports the timeout its fence is computed from; the
claim's is kept with the attempt (``jobs.fence_timeout_s``, a gang's node's in ``gang``), and the sweep waits the
longer of it and the configuration's. Through the functions, against a real Postgres."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from zen.core import silence
from zen.core.lease import MAX_HEARTBEAT_TIMEOUT_S, Deadlines, attempt_deadlines
from zen.store import repository

OLD_TIMEOUT_S = 300.0  # the configuration the VM booted with; Zen's is the default 120 s


def status(zen, job_id: str) -> tuple[str, int]:
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT status, attempt FROM jobs WHERE job_id = :id", id=job_id)
    return row["status"], row["attempt"]


def fence_timeout(zen, job_id: str) -> float | None:
    with zen.db.transaction() as session:
        [row] = session.sql("SELECT fence_timeout_s FROM jobs WHERE job_id = :id", id=job_id)
    return row["fence_timeout_s"]


def rejected(zen) -> list[str]:
    with zen.db.transaction() as session:
        return [row["reason"] for row in session.sql("SELECT reason FROM rejected_messages ORDER BY id")]


def running(fn, job_id: str, vm: str = "vm-a", **stated) -> None:
    fn.submit(job_request(job_id))
    fn.heartbeat(heartbeat(job_id, "CLAIMED", 1, vm=vm, **stated))
    fn.heartbeat(heartbeat(job_id, "RUNNING", 2, vm=vm, **stated))


def test_an_attempt_whose_agent_fences_from_a_longer_timeout_is_lost_only_past_it(zen_and_fn, clock):
    zen, fn = zen_and_fn
    assert zen.config.deadlines.heartbeat_timeout_s == 120
    running(fn, "old-vm", heartbeat_timeout_s=OLD_TIMEOUT_S)
    assert fence_timeout(zen, "old-vm") == OLD_TIMEOUT_S
    clock.advance(130)  # past Zen's 120 s; its agent's fence (300 s less the grace and margin) is still up
    zen.jobs.sweeps.sweep_lost()
    assert status(zen, "old-vm") == ("RUNNING", 1)
    with zen.db.transaction() as session:
        job = repository.get_job(session, "old-vm")
    assert silence.decide_silence(job, zen.clock(), zen.config.deadlines) is None  # read anyway: not lost yet
    clock.advance(180)  # 310 s of silence: past the timeout the agent's fence was computed from
    zen.jobs.sweeps.sweep_lost()
    assert status(zen, "old-vm") == ("QUEUED", 2)


def test_an_agent_stating_nothing_is_lost_after_the_configurations_timeout(zen_and_fn, clock):
    zen, fn = zen_and_fn
    running(fn, "older-agent")
    assert fence_timeout(zen, "older-agent") is None
    clock.advance(130)
    zen.jobs.sweeps.sweep_lost()
    assert status(zen, "older-agent") == ("QUEUED", 2)


def test_a_shorter_stated_timeout_changes_nothing_and_the_next_claim_states_its_own(zen_and_fn, clock):
    zen, fn = zen_and_fn
    running(fn, "short", heartbeat_timeout_s=60.0)
    clock.advance(100)  # past what it says, within Zen's: Zen's deadline holds
    zen.jobs.sweeps.sweep_lost()
    assert status(zen, "short") == ("RUNNING", 1)
    clock.advance(30)
    zen.jobs.sweeps.sweep_lost()
    assert status(zen, "short") == ("QUEUED", 2)
    fn.heartbeat(heartbeat("short", "CLAIMED", 3, attempt=2, vm="vm-b"))  # a VM booted since: states nothing
    assert fence_timeout(zen, "short") is None


def test_a_longer_fence_waiting_does_not_hide_a_silent_job_from_the_sweeps_window(zen_and_fn, clock):
    """The sweep reads the most silent first, a window a tick (500; 1 here): an attempt within its longer fence is
    not read before it is due, so a job past its own deadline behind it is requeued."""
    zen, fn = zen_and_fn
    running(fn, "fenced", vm="vm-f", heartbeat_timeout_s=OLD_TIMEOUT_S)
    clock.advance(10)
    running(fn, "gone", vm="vm-g")
    clock.advance(130)
    zen.jobs.sweeps.sweep_lost(limit=1)
    assert (status(zen, "fenced"), status(zen, "gone")) == (("RUNNING", 1), ("QUEUED", 2))


@pytest.mark.parametrize("stated", [0, -1.0, MAX_HEARTBEAT_TIMEOUT_S + 1, "300", True, None])
def test_a_malformed_stated_timeout_is_refused_with_its_reason(zen_and_fn, stated):
    zen, fn = zen_and_fn
    fn.submit(job_request("bad"))
    fn.heartbeat(heartbeat("bad", "CLAIMED", 1, heartbeat_timeout_s=stated))
    if stated is None:  # null: not said, as an older agent's
        assert status(zen, "bad") == ("ASSIGNED", 1) and rejected(zen) == []
        return
    assert status(zen, "bad") == ("QUEUED", 1)
    [reason] = rejected(zen)
    assert "heartbeat_timeout_s" in reason


def _running_gang(fn) -> None:
    """Gang ``g`` of 2 nodes (vm-0, vm-1) claimed and running, each node stating ``OLD_TIMEOUT_S``."""
    fn.submit(job_request("g", nodes=2))
    for n, vm in enumerate(("vm-0", "vm-1")):
        fn.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=f"10.0.0.{n + 1}", heartbeat_timeout_s=OLD_TIMEOUT_S))
    for vm in ("vm-0", "vm-1"):
        fn.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm, heartbeat_timeout_s=OLD_TIMEOUT_S))


def test_a_gangs_node_stating_a_longer_timeout_is_waited_for(zen_and_fn, clock):
    zen, fn = zen_and_fn
    _running_gang(fn)
    clock.advance(5)  # no sweep exactly at a deadline: the sweep reads a job silent past it (held_jobs_silent_since)
    for seq in range(3, 14):  # node 0 beats every 30 s; node 1 is cut off from Zen
        clock.advance(30)
        fn.heartbeat(heartbeat("g", "RUNNING", seq, vm="vm-0", heartbeat_timeout_s=OLD_TIMEOUT_S))
        zen.jobs.sweeps.sweep_lost()
        assert status(zen, "g") == ("RUNNING" if 5 + 30 * (seq - 2) < OLD_TIMEOUT_S else "STOPPING", 1), seq


def test_the_configuration_bounds_the_timeout_an_agent_may_state():
    deadlines = Deadlines()
    assert attempt_deadlines(deadlines, None) is deadlines and attempt_deadlines(deadlines, 60.0) is deadlines
    assert attempt_deadlines(deadlines, 300.0).heartbeat_timeout_s == 300.0
    assert attempt_deadlines(deadlines, 10 * MAX_HEARTBEAT_TIMEOUT_S).heartbeat_timeout_s == MAX_HEARTBEAT_TIMEOUT_S
    with pytest.raises(ValueError, match="heartbeat_timeout_s"):
        Deadlines(heartbeat_timeout_s=MAX_HEARTBEAT_TIMEOUT_S + 1)


def test_a_gang_within_its_nodes_longer_fence_does_not_hide_a_silent_job_from_the_sweeps_window(zen_and_fn, clock):
    """A gang's claims state their fences' timeout too: the gang's is kept with the attempt (``jobs.fence_timeout_s``,
    the longest of its nodes'), so the sweep does not read it before it is due, as it does not a single VM's."""
    zen, fn = zen_and_fn
    _running_gang(fn)
    assert fence_timeout(zen, "g") == OLD_TIMEOUT_S
    clock.advance(10)
    running(fn, "gone", vm="vm-g")
    clock.advance(130)
    zen.jobs.sweeps.sweep_lost(limit=1)
    assert (status(zen, "g"), status(zen, "gone")) == (("RUNNING", 1), ("QUEUED", 2))


def test_a_stopping_gang_within_its_nodes_longer_fence_does_not_hide_a_silent_job_from_the_sweeps_window(
        zen_and_fn, clock):
    """A gang that stops for a node lost waits its nodes' fence (``preempted_stop_s`` of the longest stated timeout)
    before its rerun: the sweep does not read it before then either, or it filled the window while a job past its
    own deadline behind it waited."""
    zen, fn = zen_and_fn
    _running_gang(fn)
    fn.heartbeat(heartbeat("g", "PREEMPTED", 3, vm="vm-1", heartbeat_timeout_s=OLD_TIMEOUT_S))  # vm-0 told STOP
    assert status(zen, "g") == ("STOPPING", 1)
    clock.advance(10)
    running(fn, "gone", vm="vm-g")
    clock.advance(130)  # past the configuration's preempted_stop_s (120 s), within the nodes' (300 s)
    zen.jobs.sweeps.sweep_lost(limit=1)
    assert (status(zen, "g"), status(zen, "gone")) == (("STOPPING", 1), ("QUEUED", 2))
    clock.advance(OLD_TIMEOUT_S - 130)  # past the nodes' fence: the gang's rerun
    zen.jobs.sweeps.sweep_lost()
    assert status(zen, "g")[1] == 2
