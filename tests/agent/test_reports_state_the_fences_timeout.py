"""Every report of an attempt says the ``heartbeat_timeout_s`` its agent's fence is computed from (the configuration
the VM booted with: ``zen.agent.settings.with_deadlines``), so that Zen, whose configuration may have been lowered
since, does not take the attempt for lost while that fence may still be up (``zen.core.lease.attempt_deadlines``)."""

from __future__ import annotations

from dataclasses import replace

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.test_agent_loop import SETTINGS, VM, make_agent, start_message
from zen.agent.fence import fence_s
from zen.core.models import Heartbeat


def test_each_report_of_an_attempt_states_the_timeout_its_fence_is_computed_from():
    transport = FakeTransport(VM)
    transport.add_start(start_message())
    transport.answer = confirm_claims(VM)
    settings = replace(SETTINGS, heartbeat_timeout_s=300.0)
    make_agent(transport, settings).run()
    reports = [m for m in transport.published if isinstance(m, Heartbeat)]
    assert [m.status.value for m in reports][0] == "CLAIMED" and reports[-1].status.value == "SUCCEEDED"
    assert {m.heartbeat_timeout_s for m in reports} == {300.0}
    assert fence_s(settings) < 300.0  # its fence falls within what it states
