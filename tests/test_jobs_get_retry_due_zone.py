"""`zen jobs get` of a job waiting out its retry's backoff prints its hold as the row has it, which says its time is
UTC ("due 00:10:00 UTC"), while `zen explain` shows the same moment in local time. Unlabelled, in New York the
job seemed due at midnight, five hours off."""

from __future__ import annotations

from tests.messages import agent_run, job_request
from tests.test_explain_times_zone import new_york  # noqa: F401 - the fixture
from zen.cli.main import main


def test_jobs_get_prints_a_retrys_due_time_as_explain_does(functions, zen, clock, db_url, monkeypatch, capsys, new_york):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("flaky", max_retries=1, retry_backoff_s=600))
    for beat in agent_run("flaky", vm="vm-a", final="FAILED", exit_code=2):  # at 00:00 UTC: due 00:10 UTC
        functions.heartbeat(beat)
    capsys.readouterr()
    assert main(["explain", "flaky"]) == 0
    explained = capsys.readouterr().out
    assert main(["jobs", "get", "flaky"]) == 0
    got = capsys.readouterr().out
    hold = next(line for line in got.splitlines() if line.strip().startswith("hold:"))
    assert "19:10:00" in explained, explained
    assert "00:10:00" not in hold or "UTC" in hold, f"explain says {explained.strip()!r}; jobs get says {hold.strip()!r}"
