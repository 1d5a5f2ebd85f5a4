"""A job the agent stopped whose container docker could not remove may still run it (zen.agent.leftover): its
attempt says RUNNING (``LEFT_RUNNING``), its VM retires, and no final report comes. Zen reran such a job as soon as a
final report said it stopped (a queue's preemption), beside the container; now it hears none, and the job waits
while the VM says it runs. The VM must then go: a retired VM whose stopping job says its container may run on is
held for it no more, and the scaling pass deletes it; its silence then reruns the job, the VM gone. A retired VM
with a job that runs, or a stopping job saying anything else (stopping as usual), stays held."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.messages import agent_run, heartbeat, job_request
from zen.core.reports import LEFT_RUNNING
from zen.store import fleet

CLUSTER = "4xa100-40gb"


def _vm_beat(vm: str, seq: int, state: str) -> dict:
    return {"kind": "vm", "vm": vm, "cluster": CLUSTER, "region": "us-central1", "zone": "us-central1-a",
            "state": state, "seq": seq, "sent_at": datetime.now(timezone.utc).isoformat()}


def _running(functions, job_id: str, vm: str) -> None:
    functions.submit(job_request(job_id, cluster=CLUSTER))
    for beat in agent_run(job_id, vm=vm)[:-1]:  # CLAIMED, RUNNING x2: no final
        functions.heartbeat(beat)


def test_a_retired_vms_stopping_job_whose_container_may_run_holds_it_no_more(functions, zen):
    _running(functions, "left", "vm-left")
    _running(functions, "usual", "vm-usual")
    _running(functions, "runs", "vm-runs")
    _running(functions, "quiet", "vm-quiet")
    for job_id in ("left", "usual", "quiet"):
        functions.stop({"job_id": job_id})  # STOPPING
    functions.heartbeat(heartbeat("left", "RUNNING", 10, vm="vm-left", message=LEFT_RUNNING))
    functions.heartbeat(heartbeat("usual", "RUNNING", 10, vm="vm-usual", message="saving a checkpoint"))
    functions.heartbeat(heartbeat("runs", "RUNNING", 10, vm="vm-runs", message=LEFT_RUNNING))
    functions.heartbeat(heartbeat("quiet", "RUNNING", 10, vm="vm-quiet"))  # no message at all
    for n, vm in enumerate(("vm-left", "vm-usual", "vm-runs", "vm-quiet")):
        functions.heartbeat(_vm_beat(vm, 100 + n, "RETIRED"))
    with zen.db.transaction() as session:
        held = fleet.held_vms(session, CLUSTER)
        statuses = {j: session.one("get_job", job_id=j)["status"] for j in ("left", "usual", "runs", "quiet")}
    assert statuses == {"left": "STOPPING", "usual": "STOPPING", "runs": "RUNNING", "quiet": "STOPPING"}
    assert set(held) == {"vm-usual", "vm-runs", "vm-quiet"}, held  # vm-left: its deletion is what ends the container


def test_a_gangs_node_whose_container_may_run_on_a_retired_vm_holds_it_no_more(functions, zen):
    from tests.test_gang_fates import running

    running(functions)  # gang g: vm-1 and vm-2 run it (cluster 4xa100-40gb)
    functions.stop({"job_id": "g"})
    functions.heartbeat(heartbeat("g", "RUNNING", 5, vm="vm-2", message=LEFT_RUNNING))
    functions.heartbeat(heartbeat("g", "RUNNING", 5, vm="vm-1"))  # stopping as usual
    for n, vm in enumerate(("vm-1", "vm-2")):
        functions.heartbeat(_vm_beat(vm, 200 + n, "RETIRED"))
    with zen.db.transaction() as session:
        held = fleet.held_vms(session, CLUSTER)
        status = session.one("get_job", job_id="g")["status"]
    assert status == "STOPPING"
    assert set(held) == {"vm-1"}, held  # vm-2's deletion ends its node's container; the gang waits while it runs
