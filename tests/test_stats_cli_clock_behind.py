"""`zen stats` measured ages (zen_oldest_queued, zen_outbox_backlog_age) and its window against the clock of the
machine it runs on, while the rows' times come from Zen's functions and database: on a laptop 2 minutes behind, a
job queued a moment ago was -120 s old. It reads the database's clock, as every row it counts was written by."""

from __future__ import annotations

import json
from datetime import timedelta

from tests.messages import job_request
from zen.cli import main as cli, stats as statscli
from zen.core.clock import utc_now


def test_zen_stats_ages_are_not_negative_on_a_machine_whose_clock_is_behind(functions, zen, db_url, monkeypatch,
                                                                            capsys):
    functions.submit(job_request("q1"))
    with zen.db.transaction() as session:  # queued by the database's clock, as a function writes it
        session.sql("UPDATE jobs SET status = 'QUEUED', queued_at = now() WHERE job_id = 'q1'")
    monkeypatch.setattr(statscli, "utc_now", lambda: utc_now() - timedelta(minutes=2), raising=False)  # this machine's
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert cli.main(["stats", "--json"]) == 0
    [oldest] = json.loads(capsys.readouterr().out)["zen_oldest_queued"]
    assert oldest["job_id"] == "q1" and 0 <= float(oldest["age_s"]) < 60, oldest
