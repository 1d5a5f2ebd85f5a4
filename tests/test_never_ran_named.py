"""An attempt that ended before its command ran (a secret refused, a missing input, its staging past max_runtime_s):
the agent's final report has no exit code and begins with its note ("zen: ..."), then at most its staging's summary
line (``zen.agent.attempt.AttemptRunner._end``). Its history, ``zen explain``, ``zen jobs history`` and the console's
job page say that note, through the functions (functions-framework, CloudEvent envelopes) and Postgres. They said
"failed" ("FAILED - ended: failed"), a gang's "node 1 (vm-2) failed: no exit code"."""

from __future__ import annotations

import re

import pytest

from tests.messages import heartbeat, job_request
from tests.test_console_and_cli_alike import cli, get
from tests.test_explain_stopping import why
from tests.test_functions_lifecycle import job
from tests.test_gang_fates import running
from zen.console.app import create_app
from zen.console.viewers import local_identity
from zen.core.retries import ended
from zen.store import repository

SECRET = ("zen: secret HF_TOKEN: projects/p/secrets/hf/versions/1: 403 Permission 'secretmanager.versions.access' "
          "denied for resource 'projects/p/secrets/hf/versions/1'")
INPUT = ("zen: input gs://nosuch-bucket-zz/words.txt: 404 GET https://storage.googleapis.com/storage/v1/b/"
         "nosuch-bucket-zz/o?prefix=words.txt%2F: The specified bucket does not exist: nosuch-bucket-zz\n"
         "zen: staged 0 files, 0 B in 0.1 s")


def _history(zen, job_id: str) -> list[tuple[str, str]]:
    with zen.db.transaction() as session:
        return [(row["to_status"], row["reason"]) for row in repository.job_history(session, job_id)]


def _failed_before_its_command(functions, job_id: str, message: str, **final) -> None:
    functions.submit(job_request(job_id, user_id="alice", max_runtime_s=60))
    functions.heartbeat(heartbeat(job_id, "CLAIMED", 1))
    functions.heartbeat(heartbeat(job_id, "FAILED", 2, message=message, **final))  # no exit_code: it never ran


def test_a_refused_secret_is_the_reason_in_history_explain_and_the_console(config, zen, functions, db, clock, db_url,
                                                                          monkeypatch, capsys):
    _failed_before_its_command(functions, "s", SECRET)
    reason = SECRET.removeprefix("zen: ")
    assert job(zen, "s").status.value == "FAILED"
    assert _history(zen, "s")[-1] == ("FAILED", reason)
    line = why(zen, "s")
    assert line.startswith(f"ended: {reason}; "), line
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    code, out, err = cli(capsys, "explain", "s")
    assert code == 0 and out.startswith(f"s: FAILED - ended: {reason}; "), (out, err)
    code, out, err = cli(capsys, "jobs", "history", "s")
    assert code == 0 and "secret HF_TOKEN: projects/p/secrets/hf/versions/1: 403 Permission" in out, (out, err)
    html = get(create_app(config, db, local_identity("alice"), clock=clock).test_client(), "/jobs/s?fragment=1")
    said = re.search(r'id="job-why"><code>zen explain</code>: ([^<]*)</p>', html).group(1)
    assert said.replace("&#39;", "'").startswith(f"ended: {reason}; "), said


def test_a_missing_input_is_the_reason_not_its_staging_summary(functions, zen):
    _failed_before_its_command(functions, "i", INPUT)
    reason = INPUT.splitlines()[0].removeprefix("zen: ")
    assert _history(zen, "i")[-1] == ("FAILED", reason)
    assert why(zen, "i").startswith(f"ended: {reason}; ")


def test_staging_past_max_runtime_says_the_limit_and_the_note(functions, zen):
    _failed_before_its_command(functions, "t", "zen: staging exceeded max_runtime_s=60 (3 files, 1.2 GB done)\n"
                                                "zen: staged 3 files, 1.2 GB in 60.0 s", over_limit="max_runtime_s")
    assert _history(zen, "t")[-1] == (
        "FAILED", "stopped at max_runtime_s=60: staging exceeded max_runtime_s=60 (3 files, 1.2 GB done)")


def test_a_gang_node_that_never_ran_names_its_note(functions, zen):
    running(functions)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-2", message=SECRET))
    functions.heartbeat(heartbeat("g", "STOPPED", 4, vm="vm-1", exit_code=143))
    record, history = job(zen, "g"), _history(zen, "g")
    assert record.status.value == "FAILED", history
    assert history[-1] == ("FAILED", f"node 1 (vm-2) failed: {SECRET.removeprefix('zen: ')}"), history


@pytest.mark.parametrize("message, said", [
    ("zen: " + "x" * 2000, "x" * 499 + "…"),  # bounded: 500 characters (NOTE_CHARS)
    ("d/words.txt: 404 ...\nzen: staged 0 files", "failed"),  # a note past the report's preface, cut at its start
    ("", "failed"), (None, "failed"), ("zen: ", "failed"),  # an older agent's, or none
])
def test_the_note_is_its_first_line_bounded_else_the_status(message, said):
    assert ended(None, None, None, "failed", message) == said


def test_an_exit_code_still_says_the_code_not_the_note():
    assert ended(3, None, None, "failed", "zen: staged 1 file, 11 B in 0.1 s\nTraceback ...") == "exit code 3"
    assert ended(143, "max_runtime_s", 60, "failed", "zen: killed after exceeding max_runtime_s=60") == (
        "stopped at max_runtime_s=60 (exit code 143)")
