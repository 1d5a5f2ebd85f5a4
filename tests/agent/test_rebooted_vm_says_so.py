"""A VM that restarted while a job ran (a host maintenance event that restarts it, a spot VM's guest restarted, a
reboot): the agent it starts again reports the attempt its predecessor ran PREEMPTED (requeued, unspent), as for an
agent that died. Its message says the VM restarted: it said the agent died "(a crash, or the OOM killer)", and a user
reading it looked for memory their job used, for a host's event. The attempt's mark holds the boot it was written in
(``zen.agent.journal.Journal.running``); an agent that died without a reboot is told as before."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from zen.agent import journal as journal_module
from zen.agent.journal import Journal
from zen.agent.restart import report_left_running


class Reports:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int, str, str | None]] = []

    def job(self, attempt, status, *, budget_s, message=None, **_):
        self.sent.append((attempt.job_id, attempt.attempt, status.value, message))
        return True


@pytest.fixture
def boot(tmp_path, monkeypatch):
    path = tmp_path / "boot_id"
    path.write_text("boot-1\n")
    monkeypatch.setattr(journal_module, "BOOT_ID", str(path), raising=False)  # (read at each call)
    return path


def left_by_a_dead_agent(tmp_path, boot) -> None:
    """An agent (a process of its own) marks the attempt running, then dies: the mark stays, unlocked."""
    code = ("import sys; from zen.agent import journal; journal.BOOT_ID = sys.argv[2]; "
            "journal.Journal(sys.argv[1], 'vm-a').running('train-1', 1)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "work"), str(boot)], check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def report_what_was_left(tmp_path) -> list[tuple[str, int, str, str | None]]:
    journal, reports = Journal(tmp_path / "work", "vm-a"), Reports()
    assert report_left_running(journal, reports, "vm-a", logging.getLogger("test")) == 1
    return reports.sent


def test_an_attempt_a_reboot_ended_is_told_the_vm_restarted(tmp_path, boot):
    left_by_a_dead_agent(tmp_path, boot)
    boot.write_text("boot-2\n")  # the VM restarted
    [(job_id, attempt, status, message)] = report_what_was_left(tmp_path)
    assert (job_id, attempt, status) == ("train-1", 1, "PREEMPTED")
    assert message == ("zen: VM vm-a restarted (a host event, a reboot) while the job ran; the job's container went "
                       "with it (requeued, no attempt spent)"), message


def test_an_agent_that_died_without_a_reboot_is_told_as_before(tmp_path, boot):
    left_by_a_dead_agent(tmp_path, boot)
    [(_, _, status, message)] = report_what_was_left(tmp_path)
    assert status == "PREEMPTED" and message is not None and message.startswith(
        "zen: the agent on VM vm-a died while the job ran (a crash, or the OOM killer)"), message
