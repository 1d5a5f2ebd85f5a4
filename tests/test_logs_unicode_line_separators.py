"""A job whose output holds U+2028 (or U+2029, U+0085) is read whole by `zen logs`, `zen logs -f` and `zen submit
--wait` on the local stack: the sink writes each entry as one JSON line with those characters raw, and the reader ends
entries at newlines alone. Split with ``str.splitlines()``, which also ends lines at them, half an entry was parsed:
"zen: JSONDecodeError: Unterminated string ...", exit 1, nothing printed, for a job that SUCCEEDED (a script reading
`zen submit --wait`'s exit code took it for failed)."""

from __future__ import annotations

import pytest

from tests.messages import agent_run, job_request
from zen.adapters.joblogs import LocalSink, OutputEntry
from zen.cli.main import main


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_output_with_a_unicode_line_separator_is_read(functions, db_url, monkeypatch, tmp_path, capsys, separator):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setenv("ZEN_JOB_LOGS_DIR", str(tmp_path))
    functions.submit(job_request("job-1"))
    for beat in agent_run("job-1", exit_code=0):
        functions.heartbeat(beat)
    LocalSink(tmp_path).write([  # what the agent writes for `print("sample:\u2028next")`
        OutputEntry("job-1", 1, "stdout", "vm-a", 1, "t", "first line"),
        OutputEntry("job-1", 1, "stdout", "vm-a", 2, "t", f"sample:{separator}next"),
        OutputEntry("job-1", 1, "zen", "vm-a", 3, "t", "end of attempt 1", final=True)])
    capsys.readouterr()
    assert main(["logs", "job-1", "--raw"]) == 0, capsys.readouterr().err
    assert f"sample:{separator}next" in capsys.readouterr().out
    assert main(["logs", "-f", "job-1"]) == 0  # the job's exit code, as `zen submit --wait` returns it
    assert "JSONDecodeError" not in capsys.readouterr().err
