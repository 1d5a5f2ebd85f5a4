"""A final report the journal cannot write (the VM's disk full, or its ``.reports`` folder unwritable) and Pub/Sub
does not take within its budget: it was sent once and then dropped, while the agent lived on, where a journaled one
is sent again every ``RESEND_S`` (``zen.agent.journal``): Zen, hearing nothing, took the attempt for lost and ran a
job that had ended again. It is held in the agent's memory instead, and sent again as the journal's are. The disk
here is one where the journal's folder cannot be made: a file stands at ``<work dir>/.reports``."""

from __future__ import annotations

import logging

from tests.agent.fakes import confirm_claims
from tests.agent.test_agent_loop import VM, start_message
from tests.agent.test_report_journal import Recording, agent_on, first_final_fails
from zen.core.models import AgentStatus, Heartbeat


def test_a_final_report_the_journal_could_not_write_is_sent_again_while_the_agent_lives(tmp_path, caplog):
    work = tmp_path / "work"
    work.mkdir()
    (work / ".reports").write_text("{}")  # not a folder: nothing of the journal can be written
    transport = Recording(VM, work=work)
    transport.add_start(start_message("j1"))
    transport.answer = confirm_claims(VM)
    failed_at: list[float] = []
    first_final_fails(transport, on_fail=lambda message: failed_at.append(transport.clock()))
    agent = agent_on(transport)
    idle = transport.when_idle
    # Idle 120 s after the failed publish (RESEND_S is 30): the virtual clock runs on at each idle wait while the job's
    # real process runs, so a fixed 120 s could be passed before the report was first sent, and the agent told to
    # stop at its next idle pull, the resend not yet due (once in a full run).
    transport.when_idle = lambda: transport.clock() > (failed_at[0] + 120 if failed_at else 3600) and idle()
    with caplog.at_level(logging.ERROR, logger="zen.agent.journal"):
        assert agent.run() == 0

    assert any("not journaled" in r.getMessage() for r in caplog.records)  # the disk's fault, logged
    finals = [m for kind, *rest in transport.events if kind == "publish" for m in rest
              if isinstance(m, Heartbeat) and m.status is AgentStatus.SUCCEEDED]
    assert [m.job_id for m in finals] == ["j1"]  # sent again, once Pub/Sub took it


def test_a_final_report_kept_is_sent_once_more_as_the_agent_shuts_down(tmp_path):
    """Told to shut down before the next resend (a preemption, a scale-down, a host maintenance as the job ended): the
    report it kept went with the process (or with the deleted VM's disk), and Zen ran the ended job again. It is sent
    once more as the agent shuts down, within the shutdown's budget."""
    work = tmp_path / "work"
    work.mkdir()
    (work / ".reports").write_text("{}")
    transport = Recording(VM, work=work)
    transport.add_start(start_message("j1"))
    transport.answer = confirm_claims(VM)
    # Shut down as the report failed: the loop's resend never comes.
    failed = first_final_fails(transport, on_fail=lambda message: agent.request_shutdown("preempted"))
    agent = agent_on(transport)
    assert agent.run() == 0

    assert failed
    finals = [m for kind, *rest in transport.events if kind == "publish" for m in rest
              if isinstance(m, Heartbeat) and m.status is AgentStatus.SUCCEEDED]
    assert [m.job_id for m in finals] == ["j1"]
