"""A scaling pass that fails is recorded in its cluster's decisions (an ERROR row, at most once a minute per instance),
so `zen explain CLUSTER` says scaling has stopped working and why: it was in the logs alone, and a scaling refused
by the database at every pass (a permission missing after an upgrade) showed its last decisions as if all was well."""

from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_scaling_integration import CLUSTER, stack  # noqa: F401 - fixture
from zen.scaling.manager import ClusterOrchestrator


class Failing:
    name = "zen"

    def plan(self, snapshot):
        raise RuntimeError("the planner broke")


def _errors(zen):
    with zen.db.transaction() as session:
        return [r["reason"] for r in session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
                if r["action"] == "ERROR"]


def test_a_failed_pass_is_in_the_clusters_decisions_once_a_minute(stack, config, db, clock, capsys, db_url,
                                                                   monkeypatch):
    from zen.cli.main import main
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    zen.scaler = ClusterOrchestrator(config, db, clock, zen.scaler._mig_factory, policy=Failing())
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a"))
    fn.tick()
    fn.tick()  # the same minute: one row
    assert _errors(zen) == ["scaling pass failed: RuntimeError: the planner broke (the next pass tries again; "
                            "see the logs)"]
    advance(61)
    fn.tick()
    assert len(_errors(zen)) == 2
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    capsys.readouterr()
    assert main(["explain", CLUSTER]) == 0
    assert "ERROR" in capsys.readouterr().out
