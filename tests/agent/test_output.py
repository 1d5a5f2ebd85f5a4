"""The agent's output pipeline against the real local sink: line cutting, partial lines, the rate
limit's window and the size limit (see zen.agent.output)."""

from __future__ import annotations

import sys

import pytest

from tests.agent.helpers import job_command, wait_for
from zen.adapters.joblogs import LocalReader, LocalSink
from zen.agent.output import AttemptOutput, OutputLimits
from zen.agent.runner import JobSpec, RunningJob
from zen.agent.settings import AgentSettings
from zen.core.errors import ConfigError


def entries(path, job_id):
    return LocalReader(path).new_entries(job_id)


def test_long_lines_are_cut_and_nothing_is_lost(tmp_path):
    limits = OutputLimits(line_bytes=1000, flush_s=0.1)
    output = AttemptOutput("long", 1, "vm", LocalSink(tmp_path), limits)
    program = [sys.executable, "-c", "print('y' * 2500); print('short')"]
    RunningJob.start(JobSpec(job_id="long", attempt=1, command=program), local=True, output=output,
                     limits=limits).outcome()
    output.close()

    texts = [e.text for e in entries(tmp_path, "long")]
    assert texts[:4] == ["y" * 1000, "y" * 1000, "y" * 500, "short"]


def test_a_partial_line_is_shipped_while_the_job_still_runs(tmp_path):
    limits = OutputLimits(flush_s=0.2)
    output = AttemptOutput("part", 1, "vm", LocalSink(tmp_path), limits)
    job = RunningJob.start(JobSpec(job_id="part", attempt=1, command=job_command("--partial", "50%", "--sleep", "30")),
                           local=True, output=output, limits=limits)
    try:
        wait_for(lambda: [e for e in entries(tmp_path, "part") if e.text == "50%"], 10, what="the partial line")
        assert job.poll() is None
    finally:
        job.stop(1.0)
        job.outcome()
        output.close()


def test_output_faster_than_the_rate_keeps_the_tail_and_counts_what_it_drops(tmp_path):
    limits = OutputLimits(flush_s=0.05, rate_lines=20, hold_s=0.5, tail_bytes=200, line_bytes=100)
    output = AttemptOutput("fast", 1, "vm", LocalSink(tmp_path), limits)
    for number in range(1, 301):
        output.add("stdout", f"line {number}")
    assert output.close("done", budget_s=10) == 0

    shipped = entries(tmp_path, "fast")
    texts = [e.text for e in shipped]
    assert [e.seq for e in shipped] == list(range(1, len(shipped) + 1))
    assert texts[:10] == [f"line {n}" for n in range(1, 11)]
    [marker] = [t for t in texts if "dropped" in t]
    assert "dropped: output came faster than 20 lines/s" in marker
    assert texts[-2:] == ["line 300", "[zen] end of attempt 1 on vm: done"] and shipped[-1].final
    kept = [t for t in texts if t.startswith("line ")]
    assert len(kept) + int(marker.split()[1]) == 300
    assert [int(t.split()[1]) for t in kept] == sorted(int(t.split()[1]) for t in kept)


def test_an_output_numbered_after_another_goes_on_past_every_line_the_first_may_ship(tmp_path):
    """``numbered``: where an output an agent restarted writes the attempt's end goes on (``zen.agent.resume``)."""
    limits = OutputLimits(flush_s=0.05, rate_lines=20, hold_s=0.5, tail_bytes=200, line_bytes=100)
    first = AttemptOutput("again", 1, "vm", LocalSink(tmp_path), limits)
    for number in range(1, 301):  # faster than the rate: a window held back
        first.add("stdout", f"line {number}")
    numbered = first.numbered()
    first.close("done", budget_s=10)
    shipped = entries(tmp_path, "again")
    assert shipped[-1].final and shipped[-1].seq == numbered + 1, (numbered, shipped[-3:])

    resumed = AttemptOutput("again", 1, "vm", LocalSink(tmp_path / "resumed"), limits, numbered=numbered + 1)
    resumed.close("resumed", budget_s=10)
    [end] = entries(tmp_path / "resumed", "again")
    assert (end.seq, end.final) == (numbered + 2, True)


def test_output_limits_come_from_the_environment_and_bad_ones_are_refused():
    limits = AgentSettings.from_env({"ZEN_AGENT_LOG_LIMIT_BYTES": "4096", "ZEN_AGENT_LOG_TAIL_BYTES": "1024",
                                     "ZEN_AGENT_LOG_LINE_BYTES": "512", "ZEN_AGENT_LOG_RATE_LINES": "50"}).output
    assert (limits.head_bytes, limits.tail_bytes, limits.line_bytes, limits.rate_lines) == (3072, 1024, 512, 50)
    with pytest.raises(ConfigError, match="at most half"):
        AgentSettings.from_env({"ZEN_AGENT_LOG_LIMIT_BYTES": "4096", "ZEN_AGENT_LOG_TAIL_BYTES": "4000"})
    with pytest.raises(ConfigError, match="ZEN_AGENT_LOG_RATE_LINES"):
        AgentSettings.from_env({"ZEN_AGENT_LOG_RATE_LINES": "many"})
