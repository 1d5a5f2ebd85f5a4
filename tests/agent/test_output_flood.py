"""A job printing short lines faster than the rate (``zen.agent.output``): the window that holds them is bounded in
lines as well as bytes. In bytes alone, empty lines filled a 1 MiB window with a million of them: some 200 MB of the
agent's memory per attempt, and a million entries queued at once when it went, too many to send before the final
report (its tail, the job's last lines, lost). Against the real local sink, with a real process."""

from __future__ import annotations

import re
import sys

from zen.adapters.joblogs import LocalReader, LocalSink
from zen.agent.output import AttemptOutput, OutputLimits
from zen.agent.runner import JobSpec, RunningJob

LINES = 5000


def test_a_flood_of_short_lines_is_held_in_a_window_of_at_most_the_rates_lines(tmp_path):
    # 20 lines/s held 0.5 s: at most 10 lines queued, and a window of as many; its bytes (100 kB) hold all of them.
    limits = OutputLimits(flush_s=0.05, rate_lines=20, hold_s=0.5, tail_bytes=100_000)
    output = AttemptOutput("flood", 1, "vm", LocalSink(tmp_path), limits)
    program = [sys.executable, "-c", f"import sys; sys.stdout.write('x\\n' * {LINES} + 'boom\\n'); sys.exit(3)"]
    assert RunningJob.start(JobSpec(job_id="flood", attempt=1, command=program), local=True, output=output,
                            limits=limits).outcome().exit_code == 3
    assert output.close("FAILED, exit code 3", budget_s=10) == 0

    shipped = LocalReader(tmp_path).new_entries("flood")
    assert [e.seq for e in shipped] == list(range(1, len(shipped) + 1))
    assert shipped[-1].final and "exit code 3" in shipped[-1].text
    lines = [e.text for e in shipped if e.stream == "stdout"]
    assert lines[-1] == "boom"  # the tail is shipped
    dropped = sum(int(m.group(1)) for e in shipped if e.stream == "zen"
                  for m in [re.search(r"(\d+) lines \(\d+ bytes\) dropped", e.text)] if m)
    assert len(lines) + dropped == LINES + 1  # every line shipped or counted
    # Held at most 10 at a time: 5,001 lines came within the first window's time; a few windows at most go (and at 20
    # lines a second, a loaded machine's seconds add some: far from 5,001 all the same).
    assert len(lines) <= 1000, len(lines)
