"""A VM whose agent's GPU check listed no GPU as it started (NVIDIA's device files not made yet: a root process makes
them when it first opens the driver, as docker's GPU hook does at the first job; the agent runs unprivileged) takes
an answer listing none for no fault until the check has listed a GPU. The check ran only after a job's non-zero exit:
on a VM whose jobs succeeded until its GPU fell off the bus, it had never listed one, so each job failing there after
was the job's own (FAILED, an attempt spent; with ``max_attempts`` 1, its end) and the VM went on claiming the next.
Now a job's success runs the check while it has not listed a GPU, so a GPU lost later is the VM's fault."""

from __future__ import annotations

import sys
from dataclasses import replace

from tests.agent.fakes import FakeTransport, confirm_claims, run_to_final
from tests.agent.test_agent_loop import SETTINGS, VM, make_agent, start_message
from tests.agent.test_gpu_fallen_off import fake_nvidia_smi


def writes(state, text: str, exit_code: int) -> list[str]:
    """A job that leaves the fake ``nvidia-smi`` saying ``text`` from then on, then exits ``exit_code``."""
    return [sys.executable, "-c", f"import pathlib, sys; pathlib.Path({str(state)!r}).write_text({text!r}); "
                                  f"print('RuntimeError: CUDA error: unknown error' if {exit_code} else 'ok'); "
                                  f"sys.exit({exit_code})"]


def test_a_gpu_lost_after_jobs_succeeded_where_the_check_listed_none_at_the_start_is_the_vms_fault(tmp_path):
    nvidia_smi, state = fake_nvidia_smi(tmp_path, "unreachable")  # the agent starts before the device files exist
    transport = FakeTransport(VM)
    transport.add_start(start_message("first", command=writes(state, "1", 0)))  # its container made them
    transport.add_start(start_message("second", command=writes(state, "fails", 1)))  # the GPU fell off the bus
    transport.answer = confirm_claims(VM)
    settings = replace(SETTINGS, nvidia_smi=nvidia_smi, work_dir=str(tmp_path / "work"))  # a VM of 1 GPU
    agent = make_agent(transport, settings)
    second = run_to_final(agent, transport, "second")

    finals = {m[0]: m[2] for m in transport.job_reports() if m[2] not in ("CLAIMED", "RUNNING")}
    assert finals == {"first": "SUCCEEDED", "second": "PREEMPTED"}, finals  # requeued, no attempt spent
    assert "the VM's GPUs failed their check" in (second.message or ""), second.message
    assert agent.vm_beats.retired, "the VM takes no more jobs"
