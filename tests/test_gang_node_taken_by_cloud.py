"""A gang whose node's VM the cloud took, its agent's PREEMPTED lost, loses the attempt unspent, as one VM's job does.

A spot VM's notice is 30 s, and its agent's PREEMPTED may go down with it. For a job of one VM the lost-job sweep
counts such an attempt as a preemption once a scaling pass saw the VM stop (``zen.jobs.cloud_silence``); a gang's
node so taken spent the attempt (SILENT), and a gang of ``max_attempts`` 1 FAILED after one preemption of one
node; a gang whose surviving node failed first (its peer gone from its collectives) FAILED with that node's exit
code, never rerun. Now either is the cloud's taking: the other nodes stopped first, then requeued unspent (all or
nothing, no rerun beside a node of the last attempt). Through the functions, the passes' rows as a pass writes them,
against a real Postgres."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_silent_vm_taken_by_cloud import CLUSTER, _pass, _zen
from zen.store import repository

VMS = ("zen-4xa100-40gb-us-central1-ab12", "zen-4xa100-40gb-us-central1-cd34")


def _running_gang(zen, functions) -> None:
    """Gang ``g`` (2 nodes, max_attempts 1) running on two spot VMs a pass saw billed."""
    _pass(zen, "us-central1", list(VMS), list(VMS), "spot")
    zen.clock.advance(30)
    functions.submit(job_request("g", cluster=CLUSTER, nodes=2, max_attempts=1))
    for n, vm in enumerate(VMS):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=f"10.0.0.{n + 1}"))
    for vm in VMS:
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))


def _state(zen) -> tuple[str, int, int, int, list[str]]:
    with zen.db.transaction() as tx:
        job = repository.get_job(tx, "g")
        reasons = [r["reason"] for r in repository.job_history(tx, "g") if r["to_status"]]
    return job.status.value, job.attempt, job.max_attempts, job.preemptions, reasons


def test_a_gang_whose_nodes_spot_vm_a_pass_saw_stopped_is_rerun_unspent(config, db, publisher, clock, db_url,
                                                                        monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    _running_gang(zen, functions)
    seq = 3
    for n in range(5):  # the second node's VM preempted, its PREEMPTED lost; the first beats on
        zen.clock.advance(30)
        if n == 0:
            _pass(zen, "us-central1", list(VMS), [VMS[0]], "spot")
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm=VMS[0]))
        seq += 1
        functions.tick()
    assert _state(zen)[0] == "STOPPING"  # the first node is stopped before any rerun
    functions.heartbeat(heartbeat("g", "STOPPED", seq, vm=VMS[0], exit_code=-15))
    status, attempt, max_attempts, preemptions, reasons = _state(zen)
    assert (status, attempt, max_attempts, preemptions) == ("QUEUED", 2, 2, 1), reasons
    assert any(f"no heartbeat from node 1 ({VMS[1]}) for 120s, and a scaling pass saw its spot VM stopped since"
               in reason for reason in reasons), reasons


def test_a_gang_whose_node_failed_after_its_peers_vm_was_taken_is_rerun_unspent(config, db, publisher, clock,
                                                                               db_url, monkeypatch):
    """The first node's collectives broke as its peer's VM went: it exited 1 before the sweep found the peer silent.
    The gang stopped the peer (no answer: its VM is gone) and, past the fence, ended FAILED with exit code 1."""
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    _running_gang(zen, functions)
    zen.clock.advance(30)
    _pass(zen, "us-central1", list(VMS), [VMS[0]], "spot")
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm=VMS[0], exit_code=1, message="NCCL error: remote peer gone"))
    assert _state(zen)[0] == "STOPPING"
    for _ in range(int(config.deadlines.preempted_stop_s // 30) + 2):
        zen.clock.advance(30)
        functions.tick()
    status, attempt, max_attempts, preemptions, reasons = _state(zen)
    assert (status, attempt, max_attempts, preemptions) == ("QUEUED", 2, 2, 1), reasons


def test_a_gang_whose_every_vm_a_pass_saw_stopped_is_rerun_unspent(config, db, publisher, clock, db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    _running_gang(zen, functions)
    zen.clock.advance(30)
    _pass(zen, "us-central1", list(VMS), [], "spot")  # the zone's spot VMs all preempted at once
    for _ in range(5):
        zen.clock.advance(30)
        functions.tick()
    status, attempt, max_attempts, preemptions, reasons = _state(zen)
    assert (status, attempt, max_attempts, preemptions) == ("QUEUED", 2, 2, 1), reasons


def test_a_gang_whose_silent_nodes_vm_runs_on_spends_its_attempt(config, db, publisher, clock, db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    _running_gang(zen, functions)
    seq = 3
    for n in range(5):  # the second node's agent silent, its VM listed RUNNING still
        zen.clock.advance(30)
        if n == 0:
            _pass(zen, "us-central1", list(VMS), list(VMS), "spot")
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm=VMS[0]))
        seq += 1
        functions.tick()
    functions.heartbeat(heartbeat("g", "STOPPED", seq, vm=VMS[0], exit_code=-15))
    status, attempt, _, preemptions, reasons = _state(zen)
    assert (status, attempt, preemptions) == ("FAILED", 1, 0), reasons


def test_a_gang_whose_nodes_flex_start_vm_left_at_its_runs_end_says_so(config, db, publisher, clock, db_url,
                                                                       monkeypatch):
    from tests.test_silent_vm_taken_by_cloud import RUN_S

    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    pool, flex = "us-central1/flex-start", [vm.replace("us-central1-", "us-central1-flex-") for vm in VMS]
    _pass(zen, pool, flex, flex, "flex-start")
    functions.submit(job_request("g", cluster=CLUSTER, nodes=2, max_attempts=1))  # taken with the VMs' runs ahead
    for n, vm in enumerate(flex):  # (a job naming no max_runtime_s takes no flex-start VM near its run's end)
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=f"10.0.0.{n + 1}"))
    zen.clock.advance(RUN_S - 120)  # run since (no tick meanwhile), to its VMs' last minutes
    for vm in flex:
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
    zen.clock.advance(30)
    _pass(zen, pool, [flex[0]], [flex[0]], "flex-start")  # GCE deleted the second at its run's end
    for seq in range(3, 8):
        zen.clock.advance(30)
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm=flex[0]))
        functions.tick()
    functions.heartbeat(heartbeat("g", "STOPPED", 9, vm=flex[0], exit_code=-15))
    status, attempt, _, preemptions, reasons = _state(zen)
    assert (status, attempt, preemptions) == ("QUEUED", 2, 1), reasons
    assert any(f"VM {flex[1]} reached the end of its flex-start run (a scaling pass saw its flex-start VM left its MIG"
               in reason for reason in reasons), reasons


def test_a_node_silent_as_its_gang_began_to_stop_whose_vm_a_pass_saw_taken_is_told_stop(config, db, publisher,
                                                                                          clock, db_url, monkeypatch):
    """Of three nodes, two fell silent together: the gang stopped the most silent one and the one still heard, not the
    other silent one (silent too). A pass then saw that one's VM stopped, and the gang was rerun with its nodes taken as
    preempted: it was told STOP then, as its silence alone would have told it (its VM seen stopped is a pass's sight,
    not its agent's word)."""
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    vms = (*VMS, "zen-4xa100-40gb-us-central1-ef56")
    _pass(zen, "us-central1", list(vms), list(vms), "spot")
    zen.clock.advance(30)
    functions.submit(job_request("g", cluster=CLUSTER, nodes=3, max_attempts=3))
    for n, vm in enumerate(vms):
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, ip=f"10.0.0.{n + 1}"))
    for vm in vms:
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm))
    seq = 3
    for n in range(12):  # the second and third nodes silent, the third's VM seen stopped; the first beats on
        zen.clock.advance(30)
        if n == 0:
            _pass(zen, "us-central1", list(vms), list(vms[:2]), "spot")
        functions.heartbeat(heartbeat("g", "RUNNING", seq, vm=vms[0]))
        seq += 1
        functions.tick()
    functions.heartbeat(heartbeat("g", "STOPPED", seq, vm=vms[0], exit_code=-15))
    for _ in range(int(config.deadlines.preempted_stop_s // 30) + 2):
        zen.clock.advance(30)
        functions.tick()
    status, attempt, _, preemptions, reasons = _state(zen)
    assert (status, attempt, preemptions) == ("QUEUED", 2, 1), reasons
    told = [c for c in (json.loads(m.data) for m in publisher.on("zen-vm-control")) if c["vm"] == vms[2]]
    assert [(c["action"], c["attempt"]) for c in told if c["action"] == "STOP"] == [("STOP", 1)], told
