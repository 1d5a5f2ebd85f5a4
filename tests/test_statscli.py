"""``zen stats``: the figures of the Cloud Monitoring dashboard, read from Postgres after the same
scenario the metric test plays (stockout, starts, rejections, a lost attempt), under the metrics'
names; and a read command that never starts or creates a database."""

from __future__ import annotations

import json
import re

from tests.scaling.test_scaling_integration import CLUSTER, stack  # noqa: F401  (the fixture)
from tests.terraform.hcl import Module
from tests.terraform.test_monitoring import play
from zen import telemetry
from zen.cli import main as cli, stats as statscli


def test_stats_are_the_dashboards_figures_under_its_names(stack, clock):  # noqa: F811
    zen, advance, _ = stack
    clusters = {c.name: list(c.regions) for c in zen.config.clusters}

    def figures_now():
        with zen.db.transaction() as session:
            return statscli.collect(session, clusters, clock(), window_s=3600)

    running = []
    play(zen, advance, clock, before_loss=lambda: running.append(figures_now()))
    # While job a runs: its start (the current attempt's; a lost attempt's start leaves with it).
    [start] = running[0]["zen_time_to_start"]
    assert (start["cluster"], start["region"], start["jobs"], float(start["p50_s"])) == (CLUSTER, "us-west1", 1, 42.0)
    assert {(r["cluster"], r["status"]): r["jobs"] for r in running[0]["zen_jobs"]} == {
        (CLUSTER, "RUNNING"): 1, (CLUSTER, "QUEUED"): 1}
    figures = figures_now()
    assert set(figures) <= set(telemetry.METRICS) == set(Module.load().locals["log_metrics"])
    jobs = {(r["cluster"], r["status"]): r["jobs"] for r in figures["zen_jobs"]}
    assert jobs == {(CLUSTER, "QUEUED"): 2}  # a was lost and requeued; b never started
    assert [(r["cluster"], r["region"]) for r in figures["zen_region_blocked"]] == [(CLUSTER, "us-central1")]
    assert {r["action"] for r in figures["zen_scaling_decisions"]} >= {"ADD", "BLOCK"}
    assert {r["reason_class"] for r in figures["zen_rejected_messages"]} == {"malformed", "unknown", "forbidden"}
    assert figures["zen_lost_attempts"] == [{"cluster": CLUSTER, "attempts": 1}]
    assert {r["cluster"]: r["job_id"] for r in figures["zen_oldest_queued"]}[CLUSTER] in ("a", "b")
    stocked = {r["cluster"]: r for r in figures["zen_cluster_stocked_out"]}
    assert stocked[CLUSTER]["blocked_regions"] == 1 and stocked[CLUSTER]["stocked_out"] == 0
    assert {r["state"] for r in figures["zen_vms"]} <= set(telemetry.VM_STATES)
    assert figures["zen_vms"], "the MIG instances the passes saw"
    [outbox] = figures["zen_outbox_backlog_age"]
    assert outbox["rows"] >= 0


def test_zen_stats_prints_json_from_the_configured_database(db, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert cli.main(["stats", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert set(figures) - {"attempt_usd"} <= set(telemetry.METRICS)  # attempt_usd: dollars, no log metric
    assert figures["zen_outbox_backlog_age"] == [{"rows": 0, "oldest_s": 0.0}] and figures["attempt_usd"] == []
    assert cli.main(["stats"]) == 0
    assert "zen_time_to_start: " in capsys.readouterr().out


def test_zen_stats_never_starts_or_creates_a_database(no_database, capsys):
    assert cli.main(["stats"]) == 1
    assert "no database to read" in capsys.readouterr().err
    assert list(no_database.iterdir()) == []


def test_zen_jobs_counts_only_jobs_in_flight_as_the_dashboard_does(db):
    """``zen_jobs`` is ``jobs.count``: jobs still in flight (PENDING .. STOPPING), never the ended ones
    of all time, whatever the window."""
    from datetime import timedelta

    from tests.test_jobstore_contract import CLUSTER as C, NOW, a_job
    from zen.core.models import JobStatus
    from zen.store import repository

    with db.transaction() as session:
        for job_id, status in (("done", JobStatus.SUCCEEDED), ("failed", JobStatus.FAILED),
                               ("waiting", JobStatus.PENDING)):
            assert repository.insert_job(session, a_job(job_id, status))
    with db.transaction() as session:
        figures = statscli.collect(session, {C: ["us-central1"]}, NOW + timedelta(minutes=1), window_s=300)
    assert {(r["cluster"], r["status"]): r["jobs"] for r in figures["zen_jobs"]} == {(C, "PENDING"): 1}


def test_zen_stats_says_unpriced_where_an_attempt_has_no_price(functions, zen, clock, db_url, monkeypatch, capsys):
    """Its dollars' table showed a blank cell, read as nothing to pay, and never said what lacked a price, as
    `zen usage` does. An attempt that ended with no price for its machine type and region (none kept)."""
    from tests.messages import agent_run, job_request

    functions.submit(job_request("u1"))
    for beat in agent_run("u1", vm="vm-a"):
        functions.heartbeat(beat)
        clock.advance(600)
    with zen.db.transaction() as session:
        session.sql("UPDATE attempt_usage SET machine_type = 'a3-highgpu-8g', region = 'asia-south9', usd_per_hour = NULL")
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert cli.main(["stats", "--window", str(10 ** 7)]) == 0  # minutes: the test clock's days are long past
    out = capsys.readouterr().out
    assert re.search(r"asia-south9\s+\S+\s+1\s+[0-9.]+\s+unpriced", out), out
    assert "no price for a3-highgpu-8g in asia-south9" in out and "pricing.overrides" in out
