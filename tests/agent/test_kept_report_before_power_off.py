"""A final report the agent kept (Pub/Sub did not take it within its budget) is sent once more as the agent shuts
down (``Agent._send_kept``). When the shutdown ends in the VM's power-off (``zen.agent.leftover.fence_vm``: a
container docker cannot remove may run its job), that power-off is immediate (``systemctl poweroff --force
--force``, startup.sh), and the VM the MIG recreates has a new disk: the report must go before it, or Zen runs the
ended job again. Once the shutdown's time is out, no report starts: the power-off is not delayed past it."""

from __future__ import annotations

from dataclasses import replace

from tests.agent.fakes import confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from tests.agent.test_report_journal import Recording, first_final_fails, journal_files
from tests.agent.test_running_marks import final
from zen.agent.agent import Agent
from zen.agent.runner import attempt_name
from zen.core.models import Heartbeat


def powered_off_as_its_final_report_fails(tmp_path, *, after_s: float = 0.0):
    """An agent whose job's SUCCEEDED is not sent (kept), a power-off asked for as it failed (``after_s`` of the
    virtual clock later): its transport, the fence file, and whether the fence existed at each SUCCEEDED sent."""
    work, fence = tmp_path / "work", tmp_path / "fence"
    transport = Recording(VM, work=work)
    transport.add_start(start_message("j1"))
    transport.answer = confirm_claims(VM)
    fenced_at_send: list[bool] = []

    def powered_off(message: Heartbeat) -> None:
        agent.shutdown.power_off("powered off: a container left may run its job", "a container left")
        transport.clock.now += after_s

    failed = first_final_fails(transport, on_fail=powered_off,
                               on_sent=lambda message: fenced_at_send.append(fence.exists()))
    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(work), fence_file=str(fence)), transport, local=True,
                  clock=transport.clock)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    assert agent.run() == 0
    assert failed and fence.exists()
    return transport, work, fenced_at_send


def test_a_kept_final_report_is_sent_before_the_vm_is_powered_off(tmp_path):
    _, work, fenced_at_send = powered_off_as_its_final_report_fails(tmp_path)
    assert fenced_at_send == [False]  # sent once more, and before the power-off
    assert journal_files(work) == []


def test_no_kept_report_is_sent_once_the_shutdowns_time_is_out(tmp_path):
    _, work, fenced_at_send = powered_off_as_its_final_report_fails(tmp_path, after_s=3.5)  # POWER_OFF_S is 5
    assert fenced_at_send == []  # the VM's STOPPING's 2 s kept: none started
    assert len(journal_files(work)) == 1


def test_a_kept_report_starts_only_while_the_shutdown_has_time_for_it(tmp_path):
    """Two reports kept, Pub/Sub answering the first after 3.5 s of the power-off's 5: the second waits (for the next
    agent), where it started with its 1 s at least, and the next after it too, past the power-off's deadline."""
    work = tmp_path / "work"
    transport = Recording(VM, work=work)
    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(work)), transport, local=True, clock=transport.clock)
    for job_id in ("j1", "j2"):
        agent.journal.keep(final(job_id, 1)).done(False)
    agent.shutdown.power_off("powered off: a container left may run its job", "a container left")
    sent = []

    def slow(message, *, budget_s, **abandon):
        transport.clock.now += 3.5
        sent.append(message.job_id)

    transport.publish = slow
    agent._send_kept()

    assert sent == ["j1"]
    assert [p.name for p in journal_files(work)] == [attempt_name("j2", 1) + ".json"]

