"""A gang's node whose VM's GPU fell off the bus while its part ran: its command hangs on that GPU, its peer's
collectives break and the peer exits 1 first (FAILED), and Zen stops the gang's other nodes, this one among them. The
agent stopped the part (STOPPED) without looking at its VM: Zen ended the attempt as the peer's failure (FAILED, or a
retry spent), and the VM, not retired, claimed the rerun's part. Now a part stopped checks its VM's disk and GPUs as a
job's own failure does: at fault, the node reports PREEMPTED (the gang's attempt lost, unspent:
``zen.core.gang_ends.settle``) and the VM retires; a sound VM's part stays STOPPED. A real agent (local mode), a
stand-in ``nvidia-smi``, a fake transport."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from tests.agent.fakes import FakeTransport, run_to_final
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, start_message
from tests.agent.test_gpu_fallen_off import fake_nvidia_smi
from zen.agent.agent import Agent
from zen.agent.slots import Capacity, Slots
from zen.core.gang_records import GangPlace
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat

HANGS = [sys.executable, "-c", "import time; time.sleep(60)"]  # a CUDA call on a GPU gone: never returns
PLACE = GangPlace(rank=1, nodes=2, ips=["10.0.0.1", "10.0.0.2"], port=29517)


@pytest.mark.parametrize("gpus_then, status", [("3", AgentStatus.PREEMPTED), ("4", AgentStatus.STOPPED)])
def test_a_gang_node_stopped_for_its_peers_failure_on_a_vm_whose_gpu_fell_off_gives_the_attempt_back(
        tmp_path, gpus_then, status):
    nvidia_smi, state = fake_nvidia_smi(tmp_path, "4")  # sound as the agent starts: its check reaches the GPUs
    transport = FakeTransport(IDENTITY.vm, virtual_time=False)
    transport.add_start(start_message("g", command=HANGS, nodes=2, assemble_s=60))
    stopped: list[str] = []

    def zen(message):
        if not isinstance(message, Heartbeat) or message.job_id != "g":
            return []
        if message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=IDENTITY.vm, job_id="g", attempt=1, action=ControlAction.CONFIRM,
                                   reason="gang complete", gang=PLACE)]
        if message.status is AgentStatus.RUNNING and not stopped:
            state.write_text(gpus_then)  # the GPU falls off; node 0 exits 1 on its broken collectives
            stopped.append("node 0 (vm-1) failed")
            return [ControlMessage(vm=IDENTITY.vm, job_id="g", attempt=1, action=ControlAction.STOP,
                                   reason=stopped[0])]
        return []

    transport.answer = zen
    settings = replace(SETTINGS, nvidia_smi=nvidia_smi, work_dir=str(tmp_path / "work"))
    agent = Agent(IDENTITY, settings, transport, local=True, clock=transport.clock,
                  slots=Slots(Capacity(gpus=4, max_jobs=1)))  # a VM of 4 GPUs, checked
    final = run_to_final(agent, transport, "g")
    assert final.status is status, final.message
    if status is AgentStatus.PREEMPTED:
        assert (final.message or "").startswith(f"zen: VM {IDENTITY.vm} was at fault as its part stopped: its GPUs "
                                                "failed their check: `"), final.message
        assert "lists 3 of the VM's 4 GPUs" in (final.message or ""), final.message
        assert agent.pulls.exhausted() is not None  # it retires: the rerun's part goes to another VM
    else:
        assert agent.pulls.exhausted() is None
