"""`zen jobs list` shows at most --limit jobs, newest first, and says on stderr when more match: a script counting
jobs (`--json | jq length`) got the page for all of them, silently capped at 50."""

from __future__ import annotations

import json

from tests.messages import job_request
from zen.cli.main import main


def test_a_page_short_of_the_jobs_that_match_says_so_on_stderr(functions, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    for n in range(3):
        functions.submit(job_request(f"job-{n}"))
    capsys.readouterr()
    assert main(["jobs", "list", "--limit", "2", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [j["job_id"] for j in json.loads(out)] == ["job-2", "job-1"]
    assert err == "more: more than 2 jobs match, the newest shown; see more with --limit 8\n", err
    assert main(["jobs", "list", "--limit", "3", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 3 and err == ""


def test_a_cluster_the_configuration_does_not_have_is_named_on_stderr(functions, db_url, monkeypatch, capsys):
    """A typo in --cluster listed nothing, exit 0, without a word (a cluster removed keeps its jobs: not refused)."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("job-a"))
    capsys.readouterr()
    assert main(["jobs", "list", "--cluster", "1xl44"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("note: no cluster '1xl44' in the configuration (its clusters: ") and "1xl4" in err, err
    assert main(["jobs", "list", "--cluster", "1xl4"]) == 0
    assert capsys.readouterr().err == ""


def test_an_empty_listing_of_a_cluster_does_not_need_the_configuration(functions, db_url, monkeypatch, capsys, tmp_path):
    """A user of a deployed Zen needs only the database to list jobs: with ZEN_CONFIG naming no file, an empty listing
    of --cluster shows no note (it failed with the configuration's error, exit 1)."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setenv("ZEN_CONFIG", str(tmp_path / "absent.yaml"))
    assert main(["jobs", "list", "--status", "RUNNING"]) == 0  # no --cluster: the configuration is not read
    capsys.readouterr()
    code = main(["jobs", "list", "--cluster", "1xl4"])
    out, err = capsys.readouterr()
    assert code == 0, (code, out, err)
