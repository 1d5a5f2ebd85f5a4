"""zen.scaling.vms.leftovers deletes a VM whose agent's last VM heartbeat names a job that ended over agent_silence_s
(180 s) ago ("no STOP of Zen's reached it"). A job's end is when Zen heard it (not its final report's sent_at): a
final report read more than 180 s after it was sent (an agent clock behind, a Pub/Sub backlog) must not make its
VM such a leftover before the agent's next VM heartbeat (IDLE) is read."""

from __future__ import annotations

from datetime import timedelta

from tests.messages import heartbeat
from tests.scaling.test_scaling_integration import CLUSTER, stack, vm_claiming  # noqa: F401 - the fixture
from zen.store import repository


def test_a_vm_whose_job_just_reported_its_end_late_is_not_deleted_as_a_leftover(stack, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = vm_claiming(fn, stack)

    def busy(seq: int) -> dict:
        return {"version": 1, "kind": "vm", "vm": vm.name, "cluster": CLUSTER, "region": "us-west1",
                "zone": vm.zone, "state": "BUSY", "seq": seq, "sent_at": clock().isoformat(),
                "job_id": "a", "attempt": 1}

    fn.heartbeat(heartbeat("a", "RUNNING", 2, vm=vm.name, region="us-west1", zone=vm.zone,
                           sent_at=clock().isoformat()))
    fn.heartbeat(busy(2))
    for seq in range(3, 8):
        advance(50)
        fn.heartbeat(heartbeat("a", "RUNNING", seq, vm=vm.name, region="us-west1", zone=vm.zone,
                               sent_at=clock().isoformat()))
        fn.heartbeat(busy(seq))
    # The job ends; its final report is read 5 minutes after it was sent (Pub/Sub held it back, or the
    # agent's clock is 5 minutes behind). The agent's IDLE VM heartbeat is not yet read.
    sent = clock()
    advance(5)
    fn.heartbeat(heartbeat("a", "SUCCEEDED", 8, vm=vm.name, region="us-west1", zone=vm.zone, exit_code=0,
                           sent_at=(sent - timedelta(seconds=300)).isoformat()))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "a")
    assert job.status.value == "SUCCEEDED"
    fn.tick()
    with zen.db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    deleted = [d["reason"] for d in decisions if d["action"] == "DELETE" and d["vm"] == vm.name]
    live = [i.name for i in instances("us-west1") if not i.deleting]
    assert vm.name in live and not deleted, (job.finished_at, deleted)
