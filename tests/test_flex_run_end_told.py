"""A job whose flex-start VM's run ended (GCE deletes a flex-start VM ``flex_start_run_s`` after it is RUNNING) is
rerun free, as a spot VM's preemption is: its agent, shut down, reports PREEMPTED. Its history, its notices and
``zen jobs get`` said "VM ... was preempted": untrue (a flex-start VM is not preempted; its run has a set end), and
a user reading it took the job for one run on a spot VM. Now the attempt's end names the end of the VM's run
(``zen.jobs.flex_end``); a flex-start VM going away well before its run's end still reads as preempted."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.test_flex_end_margin import BEAT, RUN_S, _zen  # Zen with spot, standard and flex-start VMs, day-long runs
from zen.store import repository

VM = "zen-4xa100-40gb-us-central1-flex-ab12"
SPOT_VM = "zen-4xa100-40gb-us-central1-spot-cd34"


def _lost_after(zen, functions, vm: str, ran_s: float) -> tuple[str, int, int]:
    """A job claimed and run by ``vm``, first heard now, which reports it PREEMPTED ``ran_s`` later:
    the reason its attempt 1 was lost with, its attempt then, and how many attempts it was given unspent."""
    functions.heartbeat(BEAT | {"vm": vm, "seq": 1, "sent_at": zen.clock().isoformat()})
    functions.submit(job_request("j"))
    functions.heartbeat(heartbeat("j", "CLAIMED", 2, vm=vm))
    functions.heartbeat(heartbeat("j", "RUNNING", 3, vm=vm))
    zen.clock.advance(ran_s)
    functions.heartbeat(heartbeat("j", "PREEMPTED", 4, vm=vm, message=f"zen: VM {vm} shut down (SIGTERM)"))
    with zen.db.transaction() as tx:
        job = repository.get_job(tx, "j")
        [lost] = [r["reason"] for r in repository.all_job_events(tx) if r["to_status"] == "LOST"]
    return lost, job.attempt, job.max_attempts - job.budget


def _gang_near_its_runs_end(zen, functions) -> tuple[str, str]:
    """A gang of two running on two flex-start VMs, their runs' end 30 s away by Zen's count: its VMs."""
    vms = (VM, VM.replace("ab12", "ef56"))
    for seq, vm in enumerate(vms, 1):
        functions.heartbeat(BEAT | {"vm": vm, "seq": seq, "sent_at": zen.clock().isoformat()})
    functions.submit(job_request("g", nodes=2))
    for vm, ip in zip(vms, ("10.0.0.1", "10.0.0.2")):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=ip))
    for vm in vms:
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
    zen.clock.advance(RUN_S - zen.config.scaling.boot_estimate_s - 30)
    return vms


def test_a_job_whose_flex_start_vms_run_ended_is_told_so_not_that_it_was_preempted(config, db, publisher, clock,
                                                                                    db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    ran_s = RUN_S - zen.config.scaling.boot_estimate_s - 30  # its run's end, by Zen's count, 30 s away
    lost, attempt, unspent = _lost_after(zen, functions, VM, ran_s)  # a job of any model, no bound named
    assert "was preempted" not in lost, lost
    assert lost.startswith(f"VM {VM} reached the end of its flex-start run (flex_start_run_s {RUN_S}, about 30 s left"), lost
    assert lost.endswith("(no attempt spent)") and (attempt, unspent) == (2, 1), (lost, attempt, unspent)


def test_a_flex_start_vm_gone_well_before_its_runs_end_still_reads_as_preempted(config, db, publisher, clock,
                                                                                db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    lost, attempt, _ = _lost_after(zen, functions, VM, 2 * 3600)
    assert lost == f"VM {VM} was preempted (no attempt spent)" and attempt == 2, lost


def test_a_spot_vm_a_day_old_was_preempted(config, db, publisher, clock, db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    lost, _, _ = _lost_after(zen, functions, SPOT_VM, RUN_S - 30)
    assert lost == f"VM {SPOT_VM} was preempted (no attempt spent)", lost


def test_a_gang_whose_flex_start_vms_runs_ended_is_told_so_at_each_step(config, db, publisher, clock, db_url,
                                                                       monkeypatch):
    """A gang's VMs come from one request, granted whole, and their runs end together: the node reported first
    stops the others ("node 1 (...) was preempted: the other nodes are stopped"), the last loses the attempt."""
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    vms = _gang_near_its_runs_end(zen, functions)
    for vm in reversed(vms):
        functions.heartbeat(heartbeat("g", "PREEMPTED", 3, vm=vm, message=f"zen: VM {vm} shut down (SIGTERM)"))
    with zen.db.transaction() as tx:
        history = [(r["to_status"], r["reason"]) for r in repository.all_job_events(tx) if r["attempt"] == 1]
        attempt = repository.get_job(tx, "g").attempt
    ended = [(to, reason) for to, reason in history if to in ("STOPPING", "LOST")]
    assert [to for to, _ in ended] == ["STOPPING", "LOST"] and attempt == 2, history
    assert all("was preempted" not in reason and "reached the end of its flex-start run" in reason
               for _, reason in ended), ended


@pytest.mark.parametrize("answer", ["PREEMPTED", "STOPPED"])
def test_a_gang_whose_first_node_to_report_its_runs_end_is_rank_0_is_told_so_at_its_end(
        config, db, publisher, clock, db_url, monkeypatch, answer):
    """Rank 0's PREEMPTED first: the attempt ends on node 1's word (its own end, or its answer to the STOP), and
    names the node preempted first, rank 0 (``zen.core.gang_ends.settle``), not the VM reporting: its end said that
    rank 0's VM "was preempted", after the gang's STOPPING said it reached the end of its run."""
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    vms = _gang_near_its_runs_end(zen, functions)
    functions.heartbeat(heartbeat("g", "PREEMPTED", 3, vm=vms[0], message=f"zen: VM {vms[0]} shut down (SIGTERM)"))
    functions.heartbeat(heartbeat("g", answer, 3, vm=vms[1], exit_code=None if answer == "PREEMPTED" else 143))
    with zen.db.transaction() as tx:
        history = [(r["to_status"], r["reason"]) for r in repository.all_job_events(tx) if r["attempt"] == 1]
        attempt = repository.get_job(tx, "g").attempt
    ended = [(to, reason) for to, reason in history if to in ("STOPPING", "LOST")]
    assert [to for to, _ in ended] == ["STOPPING", "LOST"] and attempt == 2, history
    assert all("was preempted" not in reason for _, reason in ended), ended
    assert ended[-1][1].startswith(f"VM {vms[0]} reached the end of its flex-start run"), ended


def test_a_gang_whose_other_node_goes_silent_after_rank_0s_run_ended_is_told_so_at_its_end(
        config, db, publisher, clock, db_url, monkeypatch):
    """Rank 0's PREEMPTED at its run's end, node 1 deleted unheard: the lost-job sweep ends the attempt once node 1's
    fence surely fell, naming rank 0, preempted first (``zen.core.gang_ends.settle``): it said that VM "was preempted"."""
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    vms = _gang_near_its_runs_end(zen, functions)
    functions.heartbeat(heartbeat("g", "PREEMPTED", 3, vm=vms[0], message=f"zen: VM {vms[0]} shut down (SIGTERM)"))
    zen.clock.advance(zen.config.deadlines.preempted_stop_s + 1)
    functions.tick()
    with zen.db.transaction() as tx:
        lost = [r["reason"] for r in repository.all_job_events(tx) if r["attempt"] == 1 and r["to_status"] == "LOST"]
    assert len(lost) == 1 and lost[0].startswith(f"VM {vms[0]} reached the end of its flex-start run"), lost
