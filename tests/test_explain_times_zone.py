"""`zen explain JOB` printed its times (when the start was published, when it is published again, the
latest scaling decision) as bare HH:MM:SS in UTC, while `zen jobs list` and `zen watch` print local time:
outside UTC the two commands disagreed by the offset, and nothing said which zone explain's times were in.
The CLI prints them in local time; the console, whose pages show UTC, shares the line with its times
labelled UTC."""

from __future__ import annotations

import os
import time

import pytest

from tests.messages import job_request
from zen.cli.main import main


@pytest.fixture
def new_york():
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_explain_prints_times_in_the_zone_jobs_list_uses(functions, zen, clock, db_url, monkeypatch, capsys,
                                                         new_york):
    from zen.cli.queues import explain_line
    from zen.store import repository

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("job-1"))  # QUEUED, its start published at the clock's now (00:00:00 UTC)
    capsys.readouterr()

    assert main(["jobs", "list"]) == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert "12-31 19:00:00" in row  # jobs list: submitted at local time (New York, UTC-5)

    assert main(["explain", "job-1"]) == 0
    why = capsys.readouterr().out
    # Submitted and published in the same instant: explain says the clock time jobs list says (dated: the test's
    # clock is not of the day the test runs on).
    assert ("its start was published at 2025-12-31 19:00:00, and is published again at the first tick after "
            "2025-12-31 20:00:00") in why, why

    with zen.db.transaction() as session:  # the console's line (zen.console.pages): UTC, and saying so
        shown = explain_line(session, zen.config, repository.get_job(session, "job-1"))
    assert ("its start was published at 2026-01-01 00:00:00 UTC, and is published again at the first tick after "
            "2026-01-01 01:00:00 UTC") in shown, shown
