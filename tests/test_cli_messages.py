"""What `zen` tells a user who slips, as docs/reference/cli.md promises: errors are one line on stderr starting
`zen: `, a usage error names its command and that command's `--help` (exit 2), a number no command can take is
a usage error, not the database's; and `--json` carries what the table shows."""

from __future__ import annotations

import json

import pytest

from tests.messages import agent_run, job_request
from zen.cli.main import main


def _one_zen_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zen: ") and not lines[0].startswith("zen: zen "), err
    return lines[0]


def test_an_unknown_flag_names_its_command_and_that_commands_help(no_database, capsys):
    # cli.md: "a usage error names the command and its `--help`"; `zen jobs list --user` is what was meant.
    assert main(["jobs", "list", "--usr", "alice"]) == 2
    line = _one_zen_line(capsys.readouterr().err)
    assert line.startswith("zen: jobs list: ") and "`zen jobs list --help`" in line, line


def test_zen_console_usage_error_is_one_zen_line(db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert main(["console", "--prot", "8097"]) == 2
    _one_zen_line(capsys.readouterr().err)


def test_zen_console_without_a_database_says_zen_once(no_database, capsys):
    assert main(["console"]) == 1
    _one_zen_line(capsys.readouterr().err)


@pytest.mark.parametrize("url", ["mysql://zen@127.0.0.1/zen", "postgresql://zen@127.0.0.1:54x2/zen",
                                 "postgresql://zen@[::1/zen"])
def test_zen_console_with_a_malformed_database_url_names_the_variable(url, no_database, monkeypatch, capsys):
    """A port that is no number or an unclosed IPv6 host was urllib's bare ``Port could not be cast to integer
    value as '54x2'`` (in a function's cold start too), naming no variable."""
    monkeypatch.setenv("ZEN_DATABASE_URL", url)
    code = main(["console", "--port", "1"])
    line = _one_zen_line(capsys.readouterr().err)
    assert code == 2 and "ZEN_DATABASE_URL" in line and "ZEN_DEBUG" not in line, (code, line)


@pytest.mark.parametrize("argv", [["simulate", "--policies", "nope"], ["simulate", "--scenario", "nosuch"],
                                  ["simulate", "--bogus"]])
def test_zen_simulate_errors_are_zen_lines(argv, capsys):
    assert main(argv) == 2
    _one_zen_line(capsys.readouterr().err)


@pytest.mark.parametrize("argv", [["jobs", "list", "--limit", "99999999999999999999"],
                                  ["rejected", "--before", "99999999999999999999"],
                                  ["explain", "--limit", "99999999999999999999"]])
def test_a_huge_number_is_a_usage_error_not_a_database_exception(argv, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    code = main(argv)
    line = _one_zen_line(capsys.readouterr().err)
    assert code == 2 and "DataRejected" not in line, (code, line)


@pytest.mark.parametrize("attempt", ["0", "-1"])
def test_logs_of_an_attempt_that_cannot_exist_does_not_say_not_started_yet(attempt, functions, db_url, monkeypatch,
                                                                            capsys, tmp_path):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    (tmp_path / "joblogs").mkdir()
    monkeypatch.setenv("ZEN_JOB_LOGS_DIR", str(tmp_path / "joblogs"))
    functions.submit(job_request("job-1"))
    for beat in agent_run("job-1"):
        functions.heartbeat(beat)  # SUCCEEDED, attempt 1
    capsys.readouterr()
    main(["logs", "job-1", "--attempt", attempt])
    line = _one_zen_line(capsys.readouterr().err)
    assert "not started yet" not in line, line


def test_explain_array_json_says_why_its_next_task_waits(functions, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("arr", cluster="1xl4", array={"count": 3, "max_parallel": 1}))
    capsys.readouterr()
    assert main(["explain", "arr"]) == 0
    table = capsys.readouterr().out
    assert "arr-0: QUEUED - admitted; waiting for a VM of 1xl4" in table  # the text says why arr-0 waits
    assert main(["explain", "arr", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert "waiting for a VM of 1xl4" in json.dumps(got), got


def test_zen_simulate_says_every_problem_of_a_bad_scenario(tmp_path, capsys):
    """A scenario's problems come one a line: the one-line rule showed the first alone."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters:\n  - {name: x, gpu_count: 4, regions: [us-central1],\n"
                   "     max_vms_per_region: -1, max_vms: -4}\nboot: {dist: fixed, s: 60}\n")
    assert main(["simulate", "--scenario", str(bad)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) >= 2 and all(line.startswith("zen: ") for line in lines), lines
    assert any("max_vms_per_region must be >= 0" in line for line in lines)
    assert any("max_vms must be >= 0" in line for line in lines)


def test_rejected_pages_past_two_billion_rows(db_url, monkeypatch, capsys):
    """Rejection ids are bigserial and the page's hint names the next --before: a bound of 2147483647 made the
    CLI's own hint a usage error once ids passed it."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert main(["rejected", "--before", "2147483648"]) == 0
    assert main(["rejected", "--before", str(2 ** 63)]) == 2
