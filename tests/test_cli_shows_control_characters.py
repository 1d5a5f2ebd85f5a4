"""What a job's submitter wrote reaches other people's terminals through `zen jobs get`, `zen jobs history` and
`zen rejected`: a stop's reason, the command, the output's tail, a refusal's reason quoting the message. Control characters
in them were printed as they were, so one user's job could clear an operator's screen, rewrite lines above
(``\\r``, cursor moves), set the terminal's title (OSC), or add rows of its own to a table (a line break in a
cell). The CLI shows them escaped (``\\x1b``) instead; ``--json`` keeps the text as it is."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from zen.cli.main import main

ESCAPES = "\x1b]0;zen: all jobs ok\x07\x1b[2J\x1b[H"
FAKE_ROW = "\n2026-01-01T00:00:00+00:00  1  RUNNING  SUCCEEDED  agent  exit code 0\r"


def _raw(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 0x20 and c not in "\n") or 0x7f <= ord(c) < 0xa0]


def test_a_jobs_words_reach_the_terminal_escaped(functions, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("job-esc", command=["sh", "-c", f"echo hi{ESCAPES}\rrm -rf /data"]))
    functions.heartbeat(heartbeat("job-esc", "CLAIMED", 1, vm="vm-a"))
    functions.heartbeat(heartbeat("job-esc", "RUNNING", 2, vm="vm-a"))
    functions.stop({"job_id": "job-esc", "reason": f"done{ESCAPES}{FAKE_ROW}"})
    functions.heartbeat(heartbeat("job-esc", "STOPPED", 3, vm="vm-a", message=f"step 1\n{ESCAPES}step 2\x9b2J"))
    functions.submit({**job_request("job-gpu"), "cluster": None, "gpu_count": 1, "gpu_type": f"h100{ESCAPES}"})
    capsys.readouterr()

    assert main(["jobs", "get", "job-esc"]) == 0
    shown = capsys.readouterr().out
    assert _raw(shown) == []
    assert "\\x1b]0;zen: all jobs ok\\x07\\x1b[2J" in shown and "\\rrm -rf /data" in shown and "\\x9b2J" in shown

    assert main(["jobs", "history", "job-esc"]) == 0
    table = capsys.readouterr().out
    assert _raw(table) == []
    rows = table.splitlines()
    assert len(rows) == 1 + 6 and "STOPPING" in rows[-2] and "CANCELLED" in rows[-1]  # the header, six changes
    assert "\\n2026-01-01T00:00:00+00:00  1  RUNNING  SUCCEEDED  agent  exit code 0\\r" in rows[-2]

    assert main(["rejected"]) == 0
    rejected = capsys.readouterr().out
    assert _raw(rejected) == [] and "\\x1b]0;zen: all jobs ok" in rejected

    assert main(["jobs", "history", "job-esc", "--json"]) == 0  # scripts get the text as it is
    assert ESCAPES in json.loads(capsys.readouterr().out)[-2]["reason"]


def test_every_mark_that_reorders_text_is_escaped():
    """Unicode's bidirectional controls (``Bidi_Control``): the left-to-right, right-to-left and Arabic letter marks,
    the embeddings and overrides, the isolates. The Arabic letter mark (U+061C) was shown as it was, the other two
    marks escaped."""
    from zen.cli.kit import shown

    marks = "\u061c\u200e\u200f" + "".join(map(chr, range(0x202a, 0x202f))) + "".join(map(chr, range(0x2066, 0x206a)))
    assert [shown(f"a{mark}b") for mark in marks] == [f"a\\u{ord(mark):04x}b" for mark in marks]
