"""An idle Zen's scale tick writes one short line (issue 36: an idle local stack wrote ~160 KB of tick logs a
minute, 66 lines a tick): the gauge lines the log-based metrics read (``zen.telemetry``) are written on
activity, on a change, and every ``Quiet.REFRESH_S`` at rest, never every tick at zero."""

from __future__ import annotations

import json

import pytest

from tests.messages import job_request
from tests.scaling.test_scaling_integration import build_stack
from tests.zen_lines import zen_lines
from zen import telemetry


@pytest.fixture
def lines():
    with zen_lines() as stream:
        def taken() -> list[dict]:
            found = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
            stream.seek(0)
            stream.truncate()
            return found

        yield taken


def test_an_idle_tick_writes_one_line_and_a_change_writes_its_figures(config, db, publisher, clock, monkeypatch,
                                                                       tmp_path, lines):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, _, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    try:
        fn = FunctionsInvoker(zen)
        fn.tick()
        first = lines()
        assert {telemetry.FLEET_VMS, telemetry.JOBS_COUNT, telemetry.OUTBOX_BACKLOG,
                telemetry.SCALING_REGION, telemetry.SCALING_CLUSTER} <= {e.get("event") for e in first}
        for _ in range(3):
            advance(5)
            fn.tick()
            idle = lines()
            assert [e.get("event") for e in idle] == [telemetry.SCALE_TICK], idle
            assert sum(len(json.dumps(e)) for e in idle) < 300
        fn.submit(job_request("a", cluster="1xl4"))
        lines()
        fn.tick()
        busy = {(e.get("event"), e.get("cluster"), e.get("status"), e.get("count")) for e in lines()}
        assert (telemetry.JOBS_COUNT, "1xl4", "QUEUED", 1) in busy  # activity: written every tick
        assert not any(event == telemetry.JOBS_COUNT and cluster != "1xl4" for event, cluster, *_ in busy)
    finally:
        standin.stop()


def test_a_series_at_rest_is_written_again_every_refresh_period():
    now = [0.0]
    quiet = telemetry.Quiet(refresh_s=300, clock=lambda: now[0])
    key = ("1xl4", "us-central1", "IDLE")
    assert quiet.due(telemetry.FLEET_VMS, key, (0,), False)  # first: written
    now[0] = 60
    assert not quiet.due(telemetry.FLEET_VMS, key, (0,), False)  # at rest
    assert quiet.due(telemetry.FLEET_VMS, key, (1,), True)  # active
    assert quiet.due(telemetry.FLEET_VMS, key, (1,), True)  # active: every time
    assert quiet.due(telemetry.FLEET_VMS, key, (0,), False)  # changed back to 0
    now[0] = 359
    assert not quiet.due(telemetry.FLEET_VMS, key, (0,), False)
    now[0] = 360
    assert quiet.due(telemetry.FLEET_VMS, key, (0,), False)  # the refresh
