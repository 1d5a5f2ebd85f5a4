"""``python -m benchmarks.draws``: issue 33's targets on generator draws the bench never runs."""

from __future__ import annotations

import pytest

from benchmarks.draws import draw_range, main
from zen_dev.sim.scenario import TraceUnavailable


def test_a_range_of_draws_is_read_as_written():
    assert draw_range("700-703") == [700, 701, 702, 703] and draw_range("705") == [705]


def test_one_draw_prints_each_targets_count_and_a_knob_reaches_zen_alone(capsys):
    try:
        assert main(["703"]) == 0
    except TraceUnavailable:
        pytest.skip("the GCP A100 trace is absent")
    plain = capsys.readouterr().out
    assert "usd <= 0.90x cheapest    holds on   0 of 1 draws" in plain
    assert main(["703", "--timing", '{"cost_slack_s": 0}']) == 0
    slack0 = capsys.readouterr().out
    line = [text for text in plain.splitlines() if text.startswith("draw 703")]
    assert line and line != [text for text in slack0.splitlines() if text.startswith("draw 703")]
