"""The output pipeline when the sink misbehaves (zen.agent.output.AttemptOutput): an entry it refuses
for good, an error that is not a SinkError, a sink slower than the close budget, and the final
report's tail. In-memory sinks: what is under test is the pipeline, not Cloud Logging."""

from __future__ import annotations

import threading
import time

from zen.adapters.joblogs import SinkRefused
from zen.agent.output import AttemptOutput, OutputLimits, _Recent

FAST = OutputLimits(flush_s=0.05)


class Sink:
    def __init__(self, refuse_seq: int | None = None, fail_once: Exception | None = None, delay_s: float = 0.0):
        self.written, self.refuse_seq, self.fail_once, self.delay_s = [], refuse_seq, fail_once, delay_s

    def write(self, batch):
        time.sleep(self.delay_s)
        if self.fail_once is not None:
            error, self.fail_once = self.fail_once, None
            raise error
        if any(entry.seq == self.refuse_seq for entry in batch):
            raise SinkRefused("400 an entry over 256 KB")
        self.written += batch


def test_an_entry_the_sink_refuses_for_good_is_dropped_and_the_rest_ships():
    """A refused batch was retried for ever: everything after it in the attempt was lost."""
    sink = Sink(refuse_seq=3)
    output = AttemptOutput("j", 1, "vm", sink, FAST)
    for n in range(1, 7):
        output.add("stdout", f"line {n}")
    assert output.close(budget_s=5) == 0
    assert [e.seq for e in sink.written] == [1, 2, 4, 5, 6, 7] and output.refused == 1  # 7: the final entry


def test_an_error_that_is_not_a_sink_error_does_not_stop_the_shipping():
    """A failed token refresh (google.auth's RefreshError) escaped the ship loop and killed its thread."""
    sink = Sink(fail_once=RuntimeError("token refresh failed"))
    output = AttemptOutput("j", 1, "vm", sink, FAST)
    output.add("stdout", "a")
    deadline = time.monotonic() + 5
    while not sink.written and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [e.text for e in sink.written] == ["a"]  # shipped by the thread, after the failure
    output.close(budget_s=2)


def test_close_keeps_its_budget_with_a_slow_sink():
    """A sink that answers, slowly, was fed the whole backlog whatever the budget (a preempted VM's
    report then came after systemd killed the agent)."""
    output = AttemptOutput("j", 1, "vm", Sink(delay_s=1.0), OutputLimits(flush_s=0.05, rate_lines=2))
    for n in range(20):  # 1 MB each: a send takes at most 8 MB, so at least 3 sends of a second each
        output.add("stdout", str(n % 10) * 1_000_000)
    began = time.monotonic()
    lost = output.close(budget_s=1.5)
    assert time.monotonic() - began < 2.5 and lost > 0


def test_the_reports_tail_keeps_its_size_with_partial_lines():
    """Each partial line (a progress bar's \\r update) left a byte behind: after some thousands the 4 KB
    tail held only its last line."""
    recent = _Recent(100)
    for n in range(5000):
        recent.add(f"{n % 10}", newline=False)
    recent.add("last", newline=True)
    assert len(recent.text()) >= 90
