"""A job's line longer than ZEN_AGENT_LOG_LINE_BYTES is cut into pieces, and "nothing is lost"
(docs/reference/agent.md, job output). The cut is made at a byte count; each piece decoded on its own, a
multi-byte UTF-8 character that straddled the cut became two U+FFFD in the shipped pieces (in Cloud Logging
and the final report's tail). One decoder per stream carries the character's rest to the next piece."""

from __future__ import annotations

import sys

from zen.adapters.joblogs import LocalReader, LocalSink
from zen.agent.output import AttemptOutput, OutputLimits
from zen.agent.runner import JobSpec, RunningJob


def test_a_long_non_ascii_line_is_cut_without_breaking_a_character(tmp_path):
    limits = OutputLimits(flush_s=0.1)  # the default ZEN_AGENT_LOG_LINE_BYTES, 16384: not a multiple of 3
    output = AttemptOutput("utf8", 1, "vm", LocalSink(tmp_path), limits)
    line = "漢字" * 3000  # 3 bytes a character, 18000 bytes: two pieces, cut inside a character
    program = [sys.executable, "-c", f"import sys; sys.stdout.write({line!r} + '\\n'); print('short')"]
    job = RunningJob.start(JobSpec(job_id="utf8", attempt=1, command=program, env={"PYTHONIOENCODING": "utf-8"}),
                           local=True, output=output, limits=limits)
    job.outcome()
    output.close()

    texts = [e.text for e in LocalReader(tmp_path).new_entries("utf8") if e.stream == "stdout"]
    assert texts[-1] == "short"
    pieces = texts[:-1]
    assert len(pieces) >= 2
    assert "\ufffd" not in "".join(pieces), f"characters broken at the cut: {[p[-3:] for p in pieces]}"
    assert "".join(pieces) == line
