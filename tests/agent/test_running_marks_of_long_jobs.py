"""A job that runs for days keeps its mark (``zen.agent.journal.Journal.running``) alive: each report of its attempt
Pub/Sub accepts renews the mark (``Journal.renewed``), and a mark is judged a day old from its last renewal, not from
the attempt's start. Judged from the start, the agent systemd restarts after its predecessor died two days into a
training run dropped the attempt's mark unreported: the attempt stayed RUNNING until Zen's lost-job sweep took it,
spending one of the job's attempts, and a job that had ended, its outputs being uploaded, was not resumed but run
again from its start. A mark no agent renewed for a day is still dropped. Time is the journal's and reporter's wall
clock, moved by hand."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from tests.agent.test_agent_loop import IDENTITY, VM
from tests.agent.test_running_marks import dies, marks
from zen.agent.journal import MAX_AGE_S, Journal
from zen.agent.reports import AttemptReport, Reporter
from zen.agent.restart import report_left_running
from zen.core.models import AgentStatus

LOG = logging.getLogger("zen.agent")
DAY = 86400.0


class WallClock:
    def __init__(self) -> None:
        self.now = datetime.now(timezone.utc).timestamp()

    def __call__(self) -> float:
        return self.now


def run_for(reporter: Reporter, attempt: AttemptReport, clock: WallClock, seconds: float, every_s: float) -> None:
    """The attempt's RUNNING heartbeats every ``every_s`` for ``seconds``, each accepted by Pub/Sub."""
    end = clock.now + seconds
    while clock.now < end:
        clock.now += every_s
        assert reporter.job(attempt, AgentStatus.RUNNING, budget_s=1.0)


def test_an_attempt_running_for_days_is_reported_by_the_agent_restarted_after_its_predecessor_died(tmp_path):
    clock = WallClock()
    dead = Journal(tmp_path, VM, wall_clock=clock)
    reporter = Reporter(IDENTITY, lambda hb, **_: None, wall_clock=clock, journal=dead)
    attempt = AttemptReport("train", 3)
    dead.running("train", 3)

    run_for(reporter, attempt, clock, 2 * DAY, every_s=3600.0)  # two days of a training run, then the agent dies
    dies(dead)
    restarted, sent = Journal(tmp_path, VM, wall_clock=clock), []

    assert report_left_running(restarted, Reporter(IDENTITY, lambda hb, **_: sent.append(hb), wall_clock=clock,
                                                   journal=restarted), VM, LOG) == 1
    assert [(hb.job_id, hb.attempt, hb.status) for hb in sent] == [("train", 3, AgentStatus.PREEMPTED)]


def test_a_mark_no_agent_renewed_for_a_day_is_still_dropped(tmp_path):
    clock = WallClock()
    dead = Journal(tmp_path, VM, wall_clock=clock)
    reporter = Reporter(IDENTITY, lambda hb, **_: None, wall_clock=clock, journal=dead)
    dead.running("train", 3)
    run_for(reporter, AttemptReport("train", 3), clock, 2 * DAY, every_s=3600.0)
    dies(dead)

    clock.now += MAX_AGE_S + 60  # no agent on the VM's disk meanwhile
    restarted = Journal(tmp_path, VM, wall_clock=clock)

    assert restarted.left_running() == [] and marks(restarted) == []


def test_a_job_that_ended_after_days_has_its_upload_found_by_the_agent_restarted_meanwhile(tmp_path):
    """Its mark says how it ended (``exited``) for the restarted agent to resume the upload (``zen.agent.resume``)."""
    clock = WallClock()
    dead = Journal(tmp_path, VM, wall_clock=clock)
    reporter = Reporter(IDENTITY, lambda hb, **_: None, wall_clock=clock, journal=dead)
    attempt = AttemptReport("train", 3)
    dead.running("train", 3)
    run_for(reporter, attempt, clock, 3 * DAY, every_s=3600.0)

    dead.exited("train", 3, {"status": AgentStatus.SUCCEEDED.value, "exit_code": 0})  # its upload begins
    run_for(reporter, attempt, clock, 600.0, every_s=60.0)
    dies(dead)
    restarted = Journal(tmp_path, VM, wall_clock=clock)

    assert restarted.left_running() == [("train", 3)]
    assert restarted.ended_of("train", 3) == {"status": "SUCCEEDED", "exit_code": 0, "renewed_at": attempt.accepted_at}
