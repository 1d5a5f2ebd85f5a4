"""The marks of the attempts a VM runs (``zen.agent.journal.Journal.running``), which the agent systemd restarts after
its predecessor died reads to report those attempts ended (``zen.agent.restart``): a mark goes once the attempt's
final report is written, so a mark left means no final report of it was ever sent (a PREEMPTED sent after a
SUCCEEDED that Pub/Sub delivers late would have the job run again); a mark a live agent holds, or whose final report
the journal keeps (sent again by ``replay``), is never reported; the start's sweep of the journal's temp files
leaves the marks alone. Several ``Journal`` objects on one work directory play the agents of one VM."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone

from tests.agent.test_agent_loop import IDENTITY, VM
from zen.agent.journal import RUNNING, Journal
from zen.agent.reports import Reporter
from zen.agent.restart import report_left_running
from zen.agent.runner import attempt_name
from zen.core.models import AgentStatus, Heartbeat

LOG = logging.getLogger("zen.agent")


def final(job_id: str, attempt: int, status: AgentStatus = AgentStatus.SUCCEEDED) -> Heartbeat:
    return Heartbeat(job_id=job_id, attempt=attempt, vm=VM, region="us-central1", zone="us-central1-a", status=status,
                     seq=1, sent_at=datetime.now(timezone.utc), exit_code=0)


def dies(journal: Journal) -> None:
    """The agent holding ``journal`` dies: its locks go, its files stay."""
    for fd in journal._marks.values():
        os.close(fd)
    journal._marks.clear()


def marks(journal: Journal) -> list[str]:
    return sorted(p.name for p in journal.dir.glob(f"*{RUNNING}")) if journal.dir.exists() else []


def test_an_attempt_a_dead_agent_ran_is_found_by_the_next_and_a_live_agents_is_not(tmp_path):
    dead, live = Journal(tmp_path, VM), Journal(tmp_path, VM)
    dead.running("train", 3)
    live.running("other", 1)
    dies(dead)
    restarted = Journal(tmp_path, VM)

    restarted.replay(lambda *a, **k: None)  # the start's replay removes temp files a crash left: not the marks

    assert restarted.left_running() == [("train", 3)]
    assert marks(restarted) == sorted([f"{attempt_name('train', 3)}{RUNNING}", f"{attempt_name('other', 1)}{RUNNING}"])
    assert Journal(tmp_path, VM).left_running() == []  # both held now: the restarted agent's, and the live one's


def test_a_mark_goes_once_the_final_report_is_written_before_its_publish(tmp_path):
    journal = Journal(tmp_path, VM)
    journal.running("train", 3)

    kept = journal.keep(final("train", 3))

    assert kept is not None and marks(journal) == []
    kept.done(True)
    dies(journal)
    assert Journal(tmp_path, VM).left_running() == []


def test_a_mark_whose_final_report_the_journal_keeps_is_not_reported_the_report_is(tmp_path):
    """Died between writing the final report and removing the mark: the report says how the attempt ended."""
    dead = Journal(tmp_path, VM)
    dead.running("train", 3)
    Journal(tmp_path, VM).keep(final("train", 3)).done(False)  # written, not sent (the mark is another object's)
    dies(dead)
    restarted, sent = Journal(tmp_path, VM), []

    assert restarted.left_running() == [] and marks(restarted) == []
    assert restarted.replay(lambda hb, **_: sent.append(hb.status)) == 1 and sent == [AgentStatus.SUCCEEDED]


def test_the_restarted_agent_reports_each_attempt_left_preempted_and_keeps_nothing_once_sent(tmp_path):
    dead = Journal(tmp_path, VM)
    dead.running("train", 3)
    dead.running("eval", 1)
    dies(dead)
    restarted, sent = Journal(tmp_path, VM), []
    reporter = Reporter(IDENTITY, lambda hb, **_: sent.append(hb), journal=restarted)

    assert report_left_running(restarted, reporter, VM, LOG) == 2

    assert sorted((hb.job_id, hb.attempt, hb.status) for hb in sent) == [
        ("eval", 1, AgentStatus.PREEMPTED), ("train", 3, AgentStatus.PREEMPTED)]
    assert all("restarted" in hb.message for hb in sent)
    assert list(restarted.dir.iterdir()) == []  # sent: neither report nor mark left
    assert report_left_running(Journal(tmp_path, VM), reporter, VM, LOG) == 0  # reported once
