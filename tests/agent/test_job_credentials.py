"""Job code must not get the VM's credentials (review finding): a container on docker's default
bridge could reach the metadata server and take the agent's service-account token (forged heartbeats,
other clusters' start messages), and a job without an image ran as a plain process, as root, beside
the agent. The startup script rejects containers' traffic to the metadata server before the agent
starts; on a VM a job without an image is refused (locally it still runs as a process)."""

from __future__ import annotations

import sys

import pytest

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent.agent import Agent
from zen.agent.runner import CannotRun, JobSpec, plan_launch


def test_on_a_vm_a_job_without_an_image_is_refused_with_what_to_do():
    spec = JobSpec(job_id="j", attempt=1, command=["python", "train.py"])
    with pytest.raises(CannotRun, match=r"no image: .* VM's credentials.* with an image"):
        plan_launch(spec, local=False)
    assert plan_launch(spec, local=True).argv == ["python", "train.py"]  # the local stack has no docker


def test_a_vm_agent_fails_an_image_less_job_without_running_it(tmp_path):
    ran = tmp_path / "ran"
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message(command=[sys.executable, "-c", f"open({str(ran)!r}, 'w')"]))
    transport.answer = confirm_claims(VM)
    agent = Agent(IDENTITY, SETTINGS, transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")

    assert agent.run() == 0

    assert not ran.exists()
    [final] = [m for m in transport.published if getattr(m, "status", None) and m.status.value == "FAILED"]
    assert final.exit_code == 127 and "the job has no image" in final.message
