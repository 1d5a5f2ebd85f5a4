"""An agent's PREEMPTED note for its VM's own fault ends with what became of the attempt: "(requeued; VM ... takes no
more jobs)" (its GPUs failed their check, docker lost the job's container: ``zen.agent.attempt``), "(requeued, no
attempt spent)" (its VM restarted: ``zen.agent.restart``). The job's history kept the first inside its own brackets,
then said the rerun again: "VM vm-a gave the attempt back (... (requeued; VM vm-a takes no more jobs)) (no attempt
spent)", and once the free reruns were spent its FAILED said "requeued" of a job that was not. A reboot read "VM vm-a
gave the attempt back (VM vm-a restarted ...)". The note's requeue is now Zen's to say (its VM's retirement kept), and
a note telling the VM's own doing is said of the VM once. Through the real heartbeat function."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_agent_requeue_named import _events
from tests.test_notifications import deliver_all, events, hook, notifying, sink, secret_manager  # noqa: F401 - fixtures
from zen.agent.container import fault_reason
from zen.agent.gpucheck import vm_fault
from zen.core.lifecycle import FREE_PREEMPTIONS

GPUS = vm_fault(None, 1, "", lambda: "`nvidia-smi -L` failed (exit code 9): NVIDIA-SMI has failed")
DOCKER = fault_reason("container abc123 is not running (lost while running)")
REBOOT = ("VM vm-a restarted (a host event, a reboot) while the job ran; the job's container went with it")


def _retiring(why: str | None, vm: str = "vm-a") -> str:  # as zen.agent.attempt words it
    return f"zen: {why} (requeued; VM {vm} takes no more jobs)"


def _lost(functions, zen, job_id: str, note: str) -> str:
    functions.submit(job_request(job_id, max_attempts=1))
    functions.heartbeat(heartbeat(job_id, "CLAIMED", 1))
    functions.heartbeat(heartbeat(job_id, "PREEMPTED", 2, message=f"{note}\nlast lines of the job"))
    [lost] = [reason for _, status, reason in _events(zen, job_id) if status == "LOST"]
    return lost


def test_a_retired_vms_attempt_says_its_requeue_once(functions, zen):
    lost = _lost(functions, zen, "gpu", _retiring(GPUS))
    assert lost == (f"VM vm-a gave the attempt back ({GPUS}; VM vm-a takes no more jobs) (no attempt spent)"), lost
    lost = _lost(functions, zen, "dock", _retiring(DOCKER))
    assert lost == (f"VM vm-a gave the attempt back ({DOCKER}; VM vm-a takes no more jobs) (no attempt spent)"), lost


def test_a_reboot_is_the_vms_own_event(functions, zen):
    lost = _lost(functions, zen, "boot", f"zen: {REBOOT} (requeued, no attempt spent)")
    assert lost == f"{REBOOT} (no attempt spent)", lost


def test_a_job_failed_after_its_free_reruns_is_not_said_requeued(functions, zen):
    functions.submit(job_request("gpus", max_attempts=1))
    for attempt in range(1, FREE_PREEMPTIONS + 2):
        vm = f"vm-{attempt}"
        functions.heartbeat(heartbeat("gpus", "CLAIMED", 1, attempt=attempt, vm=vm))
        functions.heartbeat(heartbeat("gpus", "PREEMPTED", 2, attempt=attempt, vm=vm, message=_retiring(GPUS, vm)))
    [failed] = [reason for _, status, reason in _events(zen, "gpus") if status == "FAILED"]
    assert "requeued" not in failed and "NVIDIA-SMI has failed; VM vm-11 takes no more jobs" in failed, failed


def test_a_gangs_rebooted_node_is_named_by_its_own_event(functions, zen):
    from tests.test_gang_gave_back_named import _rerun

    reboot = REBOOT.replace("vm-a", "vm-2")
    events = _rerun(functions, zen, f"zen: {reboot} (requeued, no attempt spent)")
    said = reboot.removeprefix("VM vm-2 ")
    assert [reason for _, to, reason in events if to in ("STOPPING", "LOST")] == [
        f"node 1 (vm-2) {said}: the other nodes are stopped before the gang is rerun",
        f"{reboot} (no attempt spent)"], events


def test_a_reboots_notice_says_requeued(notifying, publisher, sink, config):  # noqa: F811
    zen, functions = notifying
    functions.submit(job_request("boot-1", notify=[hook(config, on=["PREEMPTED"])]))
    functions.heartbeat(heartbeat("boot-1", "CLAIMED", 1))
    functions.heartbeat(heartbeat("boot-1", "PREEMPTED", 2, message=f"zen: {REBOOT} (requeued, no attempt spent)"))
    deliver_all(functions, events(publisher))

    [notice] = sink.on("hook")
    text = notice["body"]["text"]
    assert text.startswith("Zen job boot-1 was requeued (attempt 1"), text
    assert f"): {REBOOT} (no attempt spent);" in text, text
