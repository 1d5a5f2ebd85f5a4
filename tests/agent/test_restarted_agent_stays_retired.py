"""An agent retires its VM for a fault of the VM's own (here a GPU fallen off the bus: ``zen.agent.gpucheck``), then
dies (a crash, the OOM killer, a restart by hand) and systemd restarts it on the same boot. Kept in the agent's memory
only, the retirement went with it: the new agent said IDLE, claimed the requeued job, and Zen (the claim drawn after
the RETIRED, as a recreated VM's would be) confirmed it, so the job failed again on the GPU that had fallen off, and
the VM, IDLE again, was no longer deleted as retired. The retirement is kept on the VM's disk for its boot
(``zen.agent.retired``): the restarted agent says RETIRED and claims nothing."""

from __future__ import annotations

from tests.agent.test_gpu_fallen_off import CUDA_FAILED, fake_nvidia_smi
from tests.waiting import wait_for


def test_an_agent_restarted_on_a_vm_its_predecessor_retired_claims_no_job(scheduler, agents, tmp_path):
    nvidia_smi, state = fake_nvidia_smi(tmp_path, "4")
    first = agents.start("vm-a", ZEN_AGENT_NVIDIA_SMI=nvidia_smi)
    wait_for(lambda: scheduler.vm("vm-a"), 30, what="vm-a heard (its check at the start passed)")
    state.write_text("3")  # one of the VM's 4 GPUs gone since
    scheduler.submit("train-1", CUDA_FAILED, max_attempts=1)
    wait_for(lambda: (job := scheduler.job("train-1")) and job.status.value == "QUEUED" and job.attempt == 2,
             60, what="train-1 requeued")
    wait_for(lambda: first.said("taking no more jobs"), 30, what="vm-a retired")
    first.kill()  # the OOM killer: systemd starts the agent again, on the same boot
    before = len(first.logs())  # (one log for the VM's agents)
    state.write_text("unreachable")  # the driver answers no more: the check at the start lists none, no fault

    again = agents.start("vm-a", ZEN_AGENT_NVIDIA_SMI=nvidia_smi)
    said = wait_for(lambda: [line["message"] for line in again.logs()[before:]
                             if line["message"] in ("taking no more jobs", "claim confirmed")], 60,
                    what="the restarted agent retired or claimed")
    assert said[0] == "taking no more jobs", said
    job = scheduler.job("train-1")
    assert job is not None and job.status.value == "QUEUED" and job.attempt == 2, (job.status, job.attempt)
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 30, what="vm-a still retired")


def test_the_mark_holds_for_its_boot_only(tmp_path):
    from zen.agent.retired import RetiredMark

    mark = RetiredMark(tmp_path / ".retired" / "vm-a", boot="boot-1")
    assert mark.load() is None
    mark.keep("the VM's GPUs failed their check")
    assert RetiredMark(mark.path, boot="boot-1").load() == "the VM's GPUs failed their check"
    assert RetiredMark(mark.path, boot="boot-2").load() is None  # rebooted: the next agent decides afresh


def test_an_agent_started_on_a_vm_retired_this_boot_says_retired_first_and_pulls_nothing(tmp_path):
    """Its first VM heartbeat says RETIRED, never IDLE (idle supply to Zen, its warm cache offered starts)."""
    from dataclasses import replace

    from tests.agent.fakes import FakeTransport
    from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
    from zen.agent.agent import Agent
    from zen.agent.limits import DailyPulls, PullLimits
    from zen.agent.retired import RetiredMark, path_for
    from zen.core.vm_heartbeat import VmHeartbeat

    RetiredMark(path_for(tmp_path, VM)).keep("the VM's GPUs failed their check")  # by the agent before it
    transport = FakeTransport(VM)
    transport.add_start(start_message())
    pulls = DailyPulls(PullLimits(), 4, transport.clock)
    pulls.remember_in(RetiredMark(path_for(tmp_path, VM)))
    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path)), transport, local=True, clock=transport.clock,
                  pulls=pulls)

    def over_at_its_first_word(message):
        if isinstance(message, VmHeartbeat):
            agent.request_shutdown("test over")
        return []

    transport.answer = over_at_its_first_word
    assert agent.run() == 0

    assert transport.vm_states()[0] == "RETIRED", transport.vm_states()
    assert transport.job_reports() == [] and len(transport.starts) == 1  # nothing claimed, nothing pulled
