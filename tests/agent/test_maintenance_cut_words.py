"""A host maintenance that cuts an attempt's transfer or its image's pull is told as a host maintenance, not as a
preemption. After the metadata server's maintenance notice, GCE's stop is a shutdown as a preemption's
(``zen.agent.shutdown``, ``Shutdown.maintenance``), and a job it stopped is reported "VM ... is stopping for host
maintenance"; but an upload of
outputs, a staging or a pull the shutdown cut said "VM ... shut down while ...", which Zen tells the job's user as its
VM's preemption (``zen.core.gave_back.shut_down``): a standard VM, which no one preempts, "was preempted" in the
job's history and notices. A real agent, a fake transport, the Cloud Storage stand-in and ``tests.agent.fakedocker``."""

from __future__ import annotations

import dataclasses
import sys
from typing import Callable

from tests.agent.fakedocker import FakeDocker
from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, make_agent, start_message
from tests.agent.test_container_ends_named import IMAGE
from tests.agent.test_output_manifest import WRITES
from tests.agent.test_staging import client  # noqa: F401 (fixture)
from tests.agent.test_upload_end import finals, settings, uploading
from zen.agent.agent import Agent
from zen.agent.imagepull import WHAT
from zen.core import gave_back
from zen.core.models import AgentStatus, ControlMessage, Heartbeat, Message
from zen.core.notify import verb


def stopped_for_maintenance(agent: Agent) -> None:
    """GCE's stop after a host maintenance's notice (``zen.agent.__main__._maintenance``)."""
    agent.shutdown.maintenance = True
    agent.request_shutdown("SIGTERM")


def confirmed_and_at_the_pull(act: Callable[[], None]) -> Callable[[Message], list[ControlMessage]]:
    """Zen's answer: every claim confirmed, and ``act`` done as the VM says it pulls the job's image."""
    confirm = confirm_claims(VM)

    def answer(message: Message) -> list[ControlMessage]:
        if (isinstance(message, Heartbeat) and message.status is AgentStatus.RUNNING
                and (message.message or "").startswith(f"zen: {WHAT}")):
            act()
        return confirm(message)

    return answer


def told(message: str | None) -> tuple[str | None, str]:
    """What Zen says the VM did, by the report's message (None: "was preempted"), and the job's notice's verb."""
    word = gave_back.why(VM, message)
    return word, verb("PREEMPTED", {"reason": f"VM {VM} {word or 'was preempted'} (no attempt spent)"})


def test_an_upload_a_host_maintenance_cut_is_not_told_as_a_preemption(client, tmp_path):  # noqa: F811
    transport = FakeTransport(VM)  # the shutdown grace passes on the manual clock, while the upload runs
    transport.add_start(start_message("up", command=[sys.executable, "-c", WRITES], outputs="gs://out-bkt/r"))
    agent = make_agent(transport, settings(tmp_path, stop_grace_s=0.5))
    confirm = confirm_claims(VM)
    transport.answer = lambda m: (uploading(m) and stopped_for_maintenance(agent)) or confirm(m)
    agent.run()

    final = finals(transport)["up"]
    assert (final.status, final.exit_code) == (AgentStatus.PREEMPTED, 0), final.message
    assert told(final.message) == ("is stopping for host maintenance while uploading outputs", "was requeued"), \
        final.message


def test_a_pull_a_host_maintenance_cut_is_not_told_as_a_preemption(tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.pulls(lines=1, every_s=0.1, stalls=True)  # pulling until the shutdown cuts it
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("pull", image=IMAGE, command=["python", "train.py"]))
    agent = Agent(IDENTITY, dataclasses.replace(SETTINGS, docker=docker.path, work_dir=str(tmp_path / "work"),
                                                pull_stall_s=600), transport, local=False)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    transport.answer = confirmed_and_at_the_pull(lambda: stopped_for_maintenance(agent))
    agent.run()

    final = finals(transport)["pull"]
    assert final.status is AgentStatus.PREEMPTED, final.message
    assert told(final.message) == (f"is stopping for host maintenance while {WHAT}", "was requeued"), final.message
    assert not [call for call in docker.calls() if call[0] == "run"]  # its command never ran
