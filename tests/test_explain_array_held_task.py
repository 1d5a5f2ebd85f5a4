"""docs/reference/cli.md: `zen explain ARRAY [--json]  # an array's progress, why the rest wait, and why its
next task waits (JSON: next, next_status, why)`. When the next task waits on a hold that is not its array's
max_parallel (the array's `--after` dependency, or a retry's backoff), `zen explain ARRAY` said only
"3 tasks: 3 waiting" and --json gave "why": null, though `zen explain TASK` knows the reason
("held: after: waiting for first"): a user asking why the whole array does not start got no answer."""

from __future__ import annotations

import json

from tests.messages import agent_run, job_request
from zen.cli.main import main


def test_explain_array_says_why_its_next_task_waits_on_a_dependency(zen_and_fn, db_url, monkeypatch, capsys):
    zen, fn = zen_and_fn
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    fn.submit(job_request("first"))
    fn.submit(job_request("arr", array={"count": 3}, after=["first"]))  # every task held until first ends
    capsys.readouterr()

    assert main(["explain", "arr-0"]) == 0
    assert "held: after: waiting for first" in capsys.readouterr().out  # the task's own line knows

    assert main(["explain", "arr", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["next"] == "arr-0" and shown["next_status"] == "PENDING"
    assert shown["why"] is not None and "waiting for first" in shown["why"], shown

    assert main(["explain", "arr"]) == 0
    assert "waiting for first" in capsys.readouterr().out


def test_explain_array_says_why_its_next_task_waits_out_a_retry(zen_and_fn, db_url, monkeypatch, capsys):
    zen, fn = zen_and_fn
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    fn.submit(job_request("rz", array={"count": 2}, max_retries=1, retry_backoff_s=600))
    for beat in agent_run("rz-0", vm="vm-a", final="FAILED", exit_code=3):  # rz-0 waits out its backoff
        fn.heartbeat(beat)
    for beat in agent_run("rz-1", vm="vm-b", final="FAILED", exit_code=3):
        fn.heartbeat(beat)
    capsys.readouterr()

    assert main(["explain", "rz", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["next"] == "rz-0"
    assert shown["why"] is not None and "retry 1 of 1" in shown["why"], shown
