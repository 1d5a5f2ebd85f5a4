"""A retried task's (or job's) hold says when its retry is due ("retry 1 of 1 after exit code 2, due 00:10:00"):
written once, in UTC, into the row (zen.core.retries.next_retry), and `zen explain` (of the task, or of its array:
"why its next task waits") printed it as it was. Every other time `zen explain` prints is local, as `zen jobs list`
and `zen watch` print them (tests/test_explain_times_zone.py), and the console labels its times UTC: outside UTC
the retry's due time was off by the offset, and said nothing of its zone. It is shown from ``hold_until`` now."""

from __future__ import annotations

from tests.messages import agent_run, job_request
from tests.test_explain_times_zone import new_york  # noqa: F401 - the fixture
from zen.cli.main import main


def test_explain_prints_a_retrys_due_time_in_the_zone_of_its_other_times(functions, zen, clock, db_url, monkeypatch,
                                                                         capsys, new_york):
    from zen.cli.queues import explain_line
    from zen.store import repository

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("sweep", array={"count": 3, "max_parallel": 1}, max_retries=1,
                                 retry_backoff_s=600))
    for beat in agent_run("sweep-0", vm="vm-a", final="FAILED", exit_code=2):  # at 00:00 UTC: due 00:10 UTC
        functions.heartbeat(beat)
    capsys.readouterr()

    assert main(["explain", "sweep"]) == 0  # the array's next task: its retry's hold
    why = capsys.readouterr().out
    assert "retry 1 of 1 after exit code 2" in why, why
    assert "due 2025-12-31 19:10:00" in why, f"the retry's due time is UTC where explain's times are local (19:10 " \
                                             f"here, dated: the test's clock is not of the day it runs on): {why}"

    with zen.db.transaction() as session:  # the console's line: UTC, and saying so
        shown = explain_line(session, zen.config, repository.get_job(session, "sweep-0"))
    assert "due 2026-01-01 00:10:00 UTC" in shown, shown
