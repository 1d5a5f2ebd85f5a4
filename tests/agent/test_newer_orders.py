"""Version skew, the other way: functions are deployed before agents, and a VM keeps the agent it booted with for
days, so an agent reads orders of a newer Zen. A STOP or a RELEASE carrying a field the agent does not know is
still obeyed (the field ignored, named in its log): dropped as invalid, a STOP was never honoured and the job ran on
past it, billed, until Zen's deadline ended it without its report. A CONFIRM with such a field is refused, as a
start is (docs/reference/messages.md, Versions): the agent does not run what it may not understand."""

from __future__ import annotations

import json
import logging

from tests.agent.fakes import FakeTransport
from tests.agent.helpers import job_command
from tests.agent.test_agent_loop import VM, make_agent, reports, start_message
from zen.agent.transport import ControlDelivery
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat


def _newer(report: Heartbeat, action: ControlAction, transport: FakeTransport) -> ControlDelivery:
    """``action`` about ``report``'s attempt as a newer Zen would send it: with a field this agent does not know."""
    order = ControlMessage(vm=VM, job_id=report.job_id, attempt=report.attempt, action=action, reason="user stop")
    data = json.dumps(order.model_dump(mode="json", exclude_none=True) | {"drain_s": 30}).encode()
    return ControlDelivery(f"n-{report.seq}", data, {"vm": VM},
                           lambda: transport.calls.append(("control_ack", report.job_id, action.value)))


def test_a_stop_with_a_field_this_agent_does_not_know_stops_the_job(caplog):
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message(command=job_command("--sleep", "8")))

    def zen(message):
        if not isinstance(message, Heartbeat):
            return []
        if message.status is AgentStatus.CLAIMED:
            return [ControlMessage(vm=VM, job_id=message.job_id, attempt=message.attempt,
                                   action=ControlAction.CONFIRM, reason="claim won")]
        if message.status is AgentStatus.RUNNING and ("control_ack", "j1", "STOP") not in transport.calls:
            return [_newer(message, ControlAction.STOP, transport)]
        return []

    transport.answer = zen
    caplog.set_level(logging.WARNING)
    assert make_agent(transport).run() == 0

    assert reports(transport)[-1] == ("j1", 1, "STOPPED")
    [told] = [r for r in caplog.records if r.getMessage() == "order taken without the fields this agent does not know"]
    assert (told.action, told.fields) == ("STOP", ["drain_s"])


def test_a_confirm_with_a_field_this_agent_does_not_know_is_refused_and_the_job_not_run():
    transport = FakeTransport(VM)  # virtual time: the unanswered claim is given back at once
    transport.add_start(start_message())
    transport.answer = lambda message: [_newer(message, ControlAction.CONFIRM, transport)] if (
        isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED) else []
    make_agent(transport).run()

    assert {status for _, _, status in reports(transport)} == {"CLAIMED"}  # never RUNNING
