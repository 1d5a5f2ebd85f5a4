"""The job's supervisor (``zen.agent.launch``) fences the job when the agent does not renew the attempt's lease
in time; the agent may renew its own lease a moment later, by a report whose publish began before the lease fell
and that Pub/Sub accepted after (``Reporter.job``: ``accepted_at`` is when its publish began). Docker could not
kill the container nor remove it: it may still run the job on its GPUs. The VM retires at once, as for a job the
agent's own fence stopped (``zen.agent.leftover``): it went on pulling and claiming beside the container for
``leftover.WAIT_S`` (5 minutes), then reported the attempt PREEMPTED, and Zen reran it. A real agent
(``zen.agent``, a fake transport, ``tests.agent.fakedocker``)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from tests.agent.fakedocker import FakeDocker
from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import wait_for
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent import fence, leftover
from zen.agent.agent import Agent
from zen.agent.runner import container_name
from zen.agent.slots import Capacity, Slots
from zen.agent.transport import TransportError
from zen.core.models import AgentStatus, Heartbeat

OLD = container_name("first", 1)
# Beats every second; the fence 3 s after the last report accepted (4.4 - 0.3 - 1.1).
SETTINGS_HERE = dataclasses.replace(SETTINGS, heartbeat_s=1.0, heartbeat_timeout_s=4.4, stop_grace_s=0.3)


class LateAccept(FakeTransport):
    """Once ``cut`` (``last`` being when the publish of the attempt's last accepted report began), the reports of
    ``first`` attempt 1 fail until one begins within the last second of the lease (``fence_s`` from ``last``):
    Pub/Sub accepts that one just after the lease's end, within its budget. A failing publish takes a while, so that
    the next one begins then, as a slow Pub/Sub's would."""

    def __init__(self, fence_s: float):
        super().__init__(VM, virtual_time=False)
        self.fence_s, self.cut, self.last, self.late = fence_s, False, 0.0, []

    def publish(self, message, *, budget_s, **abandon):
        began = time.monotonic()
        ours = isinstance(message, Heartbeat) and (message.job_id, message.attempt) == ("first", 1)
        if ours and self.cut:
            left = self.last + self.fence_s - began
            if left >= 1.0:
                time.sleep(max(0.0, min(budget_s, left - 1.8)))  # the next one begins under a second before the end
                raise TransportError("publish timed out")
            if left <= 0:
                raise TransportError("publish timed out")
            time.sleep(left + 0.05)  # accepted past the lease's end (its budget: 1 s)
            assert time.monotonic() - began <= budget_s
            self.cut = False
            self.late.append(left)
        super().publish(message, budget_s=budget_s, **abandon)
        if ours:
            self.last = began


def test_a_job_its_supervisor_fenced_whose_container_is_left_retires_the_vm_at_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("zen.agent.removal.REMOVE_PAUSE_S", 0.0)
    monkeypatch.setattr(leftover, "RETRY_S", 2.0)
    monkeypatch.setattr(leftover, "ROUND_S", 0.1)
    monkeypatch.setattr(leftover, "WAIT_S", 60.0)  # longer than the test
    caplog.set_level(logging.INFO, logger="zen.agent")
    docker = FakeDocker(tmp_path / "docker")
    settings = dataclasses.replace(SETTINGS_HERE, docker=docker.path, work_dir=str(tmp_path / "work"))
    transport = LateAccept(fence.fence_s(settings))
    transport.add_start(start_message("first", image="img:1", command=["x"], gpus=4))
    agent = Agent(IDENTITY, settings, transport, local=False, slots=Slots(Capacity(gpus=8, max_jobs=2)))
    confirm = confirm_claims(VM)
    seen: dict[str, list] = {"running": [], "left": [], "beside": [], "timers": []}

    def scheduler(message):
        if isinstance(message, Heartbeat) and (message.job_id, message.attempt) == ("first", 1) \
                and message.status is AgentStatus.RUNNING:
            seen["running"].append(message.message)
            if len(seen["running"]) == 1:
                wait_for(lambda: OLD in docker.names(), 10, what="the container running")
                docker.fail("kill")  # a hung or failing daemon: the job cannot be killed nor its container removed
                docker.fail("rm")
            elif len(seen["running"]) == 2:
                transport.cut = True  # from the report after this one
            if message.message == leftover.RUNNING_NOTE and not seen["left"]:
                seen["left"].append(message.message)  # another user's job comes
                transport.add_start(start_message("other", image="img:1", command=["x"], gpus=4))
                seen["timers"].append(threading.Timer(3.0, lambda: agent.request_shutdown("test over")))
                seen["timers"][-1].start()
        if isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED and message.job_id == "other":
            seen["beside"].append(docker.names())
            agent.request_shutdown("test over")
        return confirm(message)

    transport.answer = scheduler
    assert agent.run() == 0
    for timer in seen["timers"]:
        timer.cancel()
    assert transport.late, "no report was accepted past the supervisor's fence"
    assert seen["left"], "the job was not fenced, or its container was removed"
    said = [record.getMessage() for record in caplog.records]
    assert "the job was stopped by its supervisor: the agent did not renew its lease in time" in said
    assert "stopping the job: no heartbeat reached Zen" not in said  # the agent's own lease had not fallen
    assert seen["beside"] == [], f"another job claimed on the VM where {OLD} is left: {seen['beside']}"
    assert "RETIRED" in transport.vm_states()
