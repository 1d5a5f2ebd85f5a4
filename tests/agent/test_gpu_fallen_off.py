"""A VM whose GPU has failed (fallen off the bus: NVIDIA Xid 79; ``nvidia-smi`` failing, or listing fewer GPUs than
the VM has) fails every job it runs at once, with the job's own exit code and CUDA's "unknown error". After a job's
non-zero exit the agent checks the GPUs (``nvidia-smi -L``, bounded: ``zen.agent.gpucheck``): one that fails it makes
the attempt the VM's fault, requeued with no attempt spent (PREEMPTED, the check's output its reason), and the VM
retires. Each such job ended FAILED, charged to its user (with ``max_attempts`` 1, its end), and the VM went on
claiming the next: a black hole draining the queue. A job that fails on a sound VM stays FAILED."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from tests.waiting import wait_for
from zen.agent.gpucheck import GpuCheck

FAKE_NVIDIA_SMI = textwrap.dedent("""\
    #!{python}
    import pathlib, sys, time
    state = pathlib.Path({state!r}).read_text().strip()
    if state == "hangs":
        time.sleep(60)
    if state == "unreachable":
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        sys.exit(9)
    if state == "fails":
        print("Unable to determine the device handle for GPU0000:00:05.0: Unknown Error")
        sys.exit(255)
    for i in range(int(state)):
        print(f"GPU {{i}}: NVIDIA A100-SXM4-40GB (UUID: GPU-0000000{{i}}-aaaa-bbbb-cccc-dddddddddddd)")
""")
CUDA_FAILED = [sys.executable, "-c", "import sys; print('RuntimeError: CUDA error: unknown error'); sys.exit(1)"]


def fake_nvidia_smi(tmp_path: Path, state: str) -> tuple[str, Path]:
    """A stand-in ``nvidia-smi``: lists as many GPUs as its state file says, or fails, or hangs; and that file."""
    state_file, script = tmp_path / "gpus", tmp_path / "nvidia-smi"
    state_file.write_text(state)
    script.write_text(FAKE_NVIDIA_SMI.format(python=sys.executable, state=str(state_file)))
    script.chmod(0o755)
    return str(script), state_file


def test_a_job_failing_on_a_vm_whose_gpu_fell_off_is_requeued_unspent_and_the_vm_retires(scheduler, agents, tmp_path):
    nvidia_smi, state = fake_nvidia_smi(tmp_path, "4")
    agents.start("vm-a", ZEN_AGENT_NVIDIA_SMI=nvidia_smi)
    wait_for(lambda: scheduler.vm("vm-a"), 30, what="vm-a heard (its check at the start passed)")
    state.write_text("3")  # one of the VM's 4 GPUs (cluster 4xa100-40gb) gone since
    scheduler.submit("train-1", CUDA_FAILED, max_attempts=1)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and (
        job.status.value in ("FAILED", "SUCCEEDED") or job.attempt == 2) and job, 60, what="train-1 ended or requeued")
    assert job.status.value == "QUEUED" and job.attempt == 2 and job.max_attempts == 2, (
        job.status, job.exit_code, job.message)  # (a preemption spends no attempt)
    assert "the VM's GPUs failed their check after the job exited with code 1" in (job.message or ""), job.message
    assert "lists 3 of the VM's 4 GPUs" in (job.message or ""), job.message
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 30, what="vm-a retired")


def test_a_vm_missing_a_gpu_as_its_agent_starts_retires_before_it_takes_a_job(scheduler, agents, tmp_path):
    """A GPU missing at the boot (an a2-highgpu-4g listing 3, an Xid failing ``nvidia-smi``): the VM retires at once,
    its check's output the reason. Its first job was given it: requeued when it failed, but charged when it hung until
    its ``max_runtime_s`` (a timeout is never checked), and its image pulled for nothing either way."""
    scheduler.submit("train-1", [sys.executable, "-c", "pass"], max_attempts=1)
    nvidia_smi, _ = fake_nvidia_smi(tmp_path, "3")
    short = agents.start("vm-a", ZEN_AGENT_NVIDIA_SMI=nvidia_smi)
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 30, what="vm-a retired")
    assert short.said("the GPUs' check fails before any job ran: the VM takes no job")
    (tmp_path / "sound").mkdir()
    sound, _ = fake_nvidia_smi(tmp_path / "sound", "4")
    agents.start("vm-b", ZEN_AGENT_NVIDIA_SMI=sound)
    job = scheduler.wait_status("train-1", "FAILED", "SUCCEEDED")
    assert (job.status.value, job.attempt, job.vm) == ("SUCCEEDED", 1, "vm-b"), (job.status, job.vm, job.message)


def test_a_job_hung_to_its_max_runtime_on_a_gpu_gone_is_requeued_unspent_and_the_vm_retires(scheduler, agents,
                                                                                               tmp_path):
    """A GPU that falls off the bus may leave the job's process hung on it, not failed: killed at its ``max_runtime_s``
    it was FAILED, charged (with ``max_attempts`` 1, its end), and the VM took the next job. The check runs then
    too."""
    nvidia_smi, state = fake_nvidia_smi(tmp_path, "4")
    agents.start("vm-a", ZEN_AGENT_NVIDIA_SMI=nvidia_smi)
    wait_for(lambda: scheduler.vm("vm-a"), 30, what="vm-a heard (its check at the start passed)")
    state.write_text("fails")  # an Xid since: nvidia-smi fails
    scheduler.submit("train-1", [sys.executable, "-c", "import time; time.sleep(60)"], max_attempts=1,
                     max_runtime_s=2)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and (
        job.status.value in ("FAILED", "SUCCEEDED") or job.attempt == 2) and job, 60, what="train-1 ended or requeued")
    assert job.status.value == "QUEUED" and job.attempt == 2, (job.status, job.exit_code, job.message)
    assert "was at fault as the job ran out of time: its GPUs failed their check" in (job.message or ""), job.message
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 30, what="vm-a retired")


def test_a_job_failing_on_a_sound_vm_stays_failed(scheduler, agents, tmp_path):
    nvidia_smi, _ = fake_nvidia_smi(tmp_path, "4")
    agent = agents.start("vm-a", ZEN_AGENT_NVIDIA_SMI=nvidia_smi)
    scheduler.submit("train-1", CUDA_FAILED, max_attempts=1)

    job = scheduler.wait_status("train-1", "FAILED", "SUCCEEDED")
    assert job.status.value == "FAILED" and job.exit_code == 1 and job.attempt == 1, (job.status, job.message)
    assert "GPUs failed their check" not in (job.message or ""), job.message
    assert not agent.said("taking no more jobs")


def test_a_job_failing_where_the_agent_cannot_reach_the_driver_stays_failed(scheduler, agents, tmp_path):
    """nvidia-smi failing, listing no GPU, before any job ran (NVIDIA's devices out of the agent's reach: a private
    /dev, a user without them): each job's own failure was the VM's GPUs failing, requeued and the VM retired."""
    nvidia_smi, _ = fake_nvidia_smi(tmp_path, "unreachable")
    agent = agents.start("vm-a", ZEN_AGENT_NVIDIA_SMI=nvidia_smi)
    scheduler.submit("train-1", CUDA_FAILED, max_attempts=1)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and (
        job.status.value in ("FAILED", "SUCCEEDED") or job.attempt == 2) and job, 60, what="train-1 ended or requeued")
    assert job.status.value == "FAILED" and job.exit_code == 1 and job.attempt == 1, (job.status, job.message)
    assert not agent.said("taking no more jobs")


def test_the_check_names_a_failing_or_silent_nvidia_smi(tmp_path):
    nvidia_smi, state = fake_nvidia_smi(tmp_path, "fails")
    said = GpuCheck(nvidia_smi, 4)()
    assert said is not None and "failed (exit code 255)" in said and "Unable to determine the device handle" in said
    state.write_text("hangs")
    said = GpuCheck(nvidia_smi, 4, timeout_s=0.5)()
    assert said is not None and "did not answer within 0.5 s" in said, said
    state.write_text("8")
    assert GpuCheck(nvidia_smi, 8)() is None


def test_a_check_listing_no_gpu_as_the_agent_starts_is_no_fault_and_one_listing_fewer_stays(tmp_path):
    nvidia_smi, state = fake_nvidia_smi(tmp_path, "unreachable")
    check = GpuCheck(nvidia_smi, 4).at_start()
    assert check() is None and check() is None  # the driver out of the agent's reach: a job's failure is its own
    assert check.failed_at_start is None
    state.write_text("3")
    check = GpuCheck(nvidia_smi, 4).at_start()  # a GPU gone already: the VM retires before any job
    assert check.failed_at_start is not None and "lists 3 of the VM's 4 GPUs" in check.failed_at_start
    said = check()
    assert said is not None and "lists 3 of the VM's 4 GPUs" in said, said


def test_a_gpu_lost_after_the_driver_answered_late_is_the_vms_fault(tmp_path):
    """The agent started before NVIDIA's driver answered it (a boot: the device files are made when a root process
    first opens the driver, as docker's GPU hook does at the first job; the agent runs unprivileged): its check at
    the start listed none. Once the check lists the GPUs, one lost after is the VM's fault: the check was given up
    at the start, and each job the VM ran after its GPU fell off ended FAILED, charged to its user."""
    nvidia_smi, state = fake_nvidia_smi(tmp_path, "unreachable")
    check = GpuCheck(nvidia_smi, 4).at_start()
    assert check() is None  # not reached yet
    state.write_text("4")
    assert check() is None  # reached: sound
    state.write_text("3")
    said = check()
    assert said is not None and "lists 3 of the VM's 4 GPUs" in said, said
    state.write_text("unreachable")  # the driver no longer answers, after it did
    said = check()
    assert said is not None and "couldn't communicate with the NVIDIA driver" in said, said


def test_no_nvidia_smi_checks_nothing(tmp_path):
    assert GpuCheck(str(tmp_path / "absent"), 4)() is None  # a VM without NVIDIA's driver: nothing to check
    assert GpuCheck.of(None, True, 4).command is None  # local mode: only a command named is run
    assert GpuCheck.of(None, False, 4).command == "nvidia-smi"
