"""A restarted agent's CLAIMED (a copy of the start of the attempt its dead predecessor ran: an ack that failed,
the region copy of a warm offer; an agent of this release keeps what its VM ran and claims no such copy,
zen.agent.ranlog) reaches Zen before the dead agent's journaled final report (replayed by the new agent,
zen.agent.journal, with the seq the old agent drew). The CLAIMED is "no sign of life" (delivery-guarantees.md) and
must not raise ``last_seq`` past the final report's: dropped as a duplicate, the sweep took the attempt for lost and
a job that SUCCEEDED ran again."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_late_final_reports import job, orders, starts
from tests.test_gang_fates import running
from tests.test_queues import queued_zen  # noqa: F401 - fixture


def _running(functions) -> int:
    """job-1 claimed and running on vm-a; the epoch-ms seq its claim drew (as agents draw them)."""
    functions.submit(job_request("job-1"))
    t0 = 1_700_000_000_000
    functions.heartbeat(heartbeat("job-1", "CLAIMED", t0, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", t0 + 30_000, vm="vm-a"))
    return t0


def test_restarted_agents_claim_does_not_hide_the_dead_agents_final_report(functions, zen, publisher, clock):
    functions.submit(job_request("job-1"))
    t0 = 1_700_000_000_000  # epoch-ms seqs, as agents draw them
    functions.heartbeat(heartbeat("job-1", "CLAIMED", t0, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", t0 + 30_000, vm="vm-a"))
    # The job exits 0; the old agent journals its SUCCEEDED (seq t0 + 40 s) and dies before Pub/Sub accepts it.
    # systemd restarts it 5 s later: the new agent replays the journal (publish accepted) and pulls a copy of
    # the start, which it claims. Pub/Sub delivers the CLAIMED first (no order; the report's push backed off).
    clock.advance(45)
    functions.heartbeat(heartbeat("job-1", "CLAIMED", t0 + 50_000, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "SUCCEEDED", t0 + 40_000, vm="vm-a", exit_code=0, message="done"))
    record = job(zen, "job-1")
    assert record.status.value == "SUCCEEDED", (record.status, record.attempt, record.last_seq)


def test_and_so_the_job_that_succeeded_runs_again(functions, zen, publisher, clock):
    t0 = _running(functions)
    clock.advance(45)
    functions.heartbeat(heartbeat("job-1", "CLAIMED", t0 + 50_000, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "SUCCEEDED", t0 + 40_000, vm="vm-a", exit_code=0, message="done"))
    for _ in range(4):
        clock.advance(60)
        functions.tick()
    record = job(zen, "job-1")
    assert (record.status.value, starts(publisher, "job-1")) == ("SUCCEEDED", [1]), (
        record.status, record.attempt, starts(publisher, "job-1"))


def test_nor_the_dead_agents_exit_during_a_stop(functions, zen, publisher, clock):
    """The same while STOPPING: the job exited 0 as the user's stop came (a SUCCEEDED ends it, delivery-guarantees.md),
    but the restarted agent's CLAIMED, answered STOP, raised last_seq and the exit was dropped: it ended CANCELLED."""
    t0 = _running(functions)
    functions.stop({"job_id": "job-1", "reason": "enough"})
    clock.advance(10)
    functions.heartbeat(heartbeat("job-1", "CLAIMED", t0 + 50_000, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "SUCCEEDED", t0 + 40_000, vm="vm-a", exit_code=0, message="done"))
    for _ in range(3):
        clock.advance(60)
        functions.tick()
    record = job(zen, "job-1")
    assert (record.status.value, record.exit_code) == ("SUCCEEDED", 0), (record.status, record.exit_code)


def test_a_gang_nodes_restarted_agent_does_not_hide_its_dead_agents_exit(functions, zen, clock):
    """The same for a node of a gang: vm-2's restarted agent claims a copy of the start (seq 50) before its dead
    agent's SUCCEEDED (seq 40) comes. Dropped as seen, vm-2's part read as silent, and the gang that succeeded on
    both nodes was rerun."""
    running(functions)
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-1", exit_code=0))
    clock.advance(10)
    functions.heartbeat(heartbeat("g", "CLAIMED", 50, vm="vm-2", ip="10.0.0.2"))
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 40, vm="vm-2", exit_code=0))
    record = job(zen, "g")
    assert (record.status.value, [n.status for n in record.gang]) == ("SUCCEEDED", ["SUCCEEDED", "SUCCEEDED"]), (
        record.status, record.gang)


def test_an_assigned_attempts_outcome_is_applied_below_a_claims_seq(functions, zen, publisher, clock):
    """The attempt still ASSIGNED (its RUNNING not delivered yet; RUNNING is not journaled) when an agent restarted
    before this release claims a copy of its start: Zen confirms it, as any claim of the holder's while assigned
    (zen.agent.ranlog keeps a restarted agent from making it). The dead agent's SUCCEEDED, an older seq, still ends
    the job: assigned, no outcome was applied, so only claims raised the floor. Its RUNNING after that, and the
    second run's, are told STOP."""
    functions.submit(job_request("job-1"))
    t0 = 1_700_000_000_000
    functions.heartbeat(heartbeat("job-1", "CLAIMED", t0, vm="vm-a"))
    clock.advance(45)
    functions.heartbeat(heartbeat("job-1", "CLAIMED", t0 + 50_000, vm="vm-a"))
    functions.heartbeat(heartbeat("job-1", "SUCCEEDED", t0 + 40_000, vm="vm-a", exit_code=0, message="done"))
    functions.heartbeat(heartbeat("job-1", "RUNNING", t0 + 30_000, vm="vm-a"))  # the dead agent's, at last
    functions.heartbeat(heartbeat("job-1", "RUNNING", t0 + 60_000, vm="vm-a"))  # the second run's
    record = job(zen, "job-1")
    assert (record.status.value, record.exit_code, ("STOP", 1) in orders(publisher, "vm-a")) == ("SUCCEEDED", 0, True), (
        record.status, orders(publisher, "vm-a"))


def test_a_gang_nodes_outcome_below_its_restarted_agents_claim_is_applied_while_assigned(functions, zen, clock):
    functions.submit(job_request("g", nodes=2))
    for vm, ip in (("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2")):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=ip))  # both confirmed; no RUNNING delivered yet
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 3, vm="vm-1", exit_code=0))
    clock.advance(10)
    functions.heartbeat(heartbeat("g", "CLAIMED", 50, vm="vm-2", ip="10.0.0.2"))  # vm-2's restarted agent
    functions.heartbeat(heartbeat("g", "SUCCEEDED", 40, vm="vm-2", exit_code=0))  # its dead agent's, journaled
    record = job(zen, "g")
    assert [n.status for n in record.gang] == ["SUCCEEDED", "SUCCEEDED"], (record.status, record.gang)
