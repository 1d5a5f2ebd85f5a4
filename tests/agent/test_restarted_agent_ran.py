"""An agent that journaled an attempt's SUCCEEDED and died before publishing it is restarted (systemd); the new agent
sends the report again, then pulls a spare copy of the same start (a failed ack, a warm offer's region copy). The
attempts run here are kept on disk (zen.agent.ranlog): the copy is dropped unclaimed, as the live agent drops one
(tests/agent/test_copies.py). Kept in memory only, it was claimed, Zen (the job still ASSIGNED to this VM, its
RUNNING not delivered) confirmed it, and the attempt that succeeded ran again here."""

from __future__ import annotations

from dataclasses import replace

from tests.agent.fakes import confirm_claims
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from tests.agent.test_report_journal import Recording, died_after_its_job, job_reports
from zen.agent.agent import Agent
from zen.agent.slots import Capacity, Slots


def _remembering(transport: Recording):
    """The agent as ``zen.agent.__main__`` makes it: its slots keep what it ran in its work directory."""
    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(transport.work)), transport, local=True,
                  clock=transport.clock, slots=Slots.of_vm(Capacity(), transport.work, VM))
    transport.when_idle = lambda: agent.request_shutdown("test over")
    return agent


def test_a_restarted_agent_does_not_claim_a_copy_of_a_start_its_predecessor_ran(tmp_path):
    work = tmp_path / "work"
    dying = died_after_its_job(work, _remembering)
    assert dying.died_with is not None and dying.died_with.status.value == "SUCCEEDED"

    again = Recording(VM, work=work, virtual_time=False)
    copy = again.add_start(start_message())  # a spare copy of attempt 1's start
    again.answer = confirm_claims(VM)  # the job still ASSIGNED to this VM: Zen confirms its holder's claim
    agent = _remembering(again)
    assert agent.run() == 0

    sent = [(m.attempt, m.status.value) for m in job_reports(again)]
    assert sent == [(1, "SUCCEEDED")], sent  # the journaled report only; no CLAIMED, no second run
    assert ("ack", copy) in again.calls and agent.jobs_run == 0


def test_the_attempts_run_are_kept_compacted_and_a_cut_line_is_skipped(tmp_path):
    from zen.agent.ranlog import RanLog

    path = tmp_path / ".ran-vm"
    log = RanLog(path, kept=3)
    newest: list[tuple[str, int]] = []
    for n in range(1, 8):
        newest.append((f"job-{n}", 1))
        log.add((f"job-{n}", 1), newest)
    assert len(path.read_text().splitlines()) < 6  # rewritten with the newest 3 once it held twice as many
    with open(path, "a") as out:
        out.write("2 job-")  # a crash mid-write
    again = RanLog(path, kept=3)
    assert again.load() == [("job-5", 1), ("job-6", 1), ("job-7", 1)]
    again.add(("job-8", 1), [("job-6", 1), ("job-7", 1), ("job-8", 1)])  # the cut line goes with a rewrite
    assert RanLog(path, kept=3).load() == [("job-6", 1), ("job-7", 1), ("job-8", 1)]


def test_an_unwritable_disk_keeps_them_in_memory(tmp_path, caplog):
    from zen.agent.slots import Capacity, Slots

    (tmp_path / "file").write_text("")
    slots = Slots()
    slots.remember_in(tmp_path / "file" / ".ran-vm")  # its directory is a file: nothing can be written
    slots.running(("job-1", 1))
    slots.running(("job-2", 1))
    assert slots.ran(("job-1", 1)) and slots.ran(("job-2", 1))
    assert sum("could not keep the attempts" in r.message for r in caplog.records) == 1
