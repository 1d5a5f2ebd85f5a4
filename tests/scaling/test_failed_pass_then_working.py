"""A failed pass's ERROR row is not "the cluster's latest scaling decision" in `zen explain JOB` once a pass worked
since (one that decides nothing writes no row, but records its memory): a transient failure read as scaling still
broken."""

from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_scaling_integration import CLUSTER, stack  # noqa: F401 - fixture
from zen.scaling.manager import ClusterOrchestrator
from zen.scaling.model import Plan, RegionMemory


class Failing:
    name = "zen"

    def plan(self, snapshot):
        raise RuntimeError("a blip")


class Nothing:
    name = "zen"

    def plan(self, snapshot):
        return Plan(memory={r: snapshot.memory.get(r, RegionMemory()) for r in snapshot.cluster.regions})


def test_a_working_pass_after_a_failed_one_hides_its_error_from_a_jobs_explain(stack, config, db, clock, capsys, db_url, monkeypatch):
    from zen.cli.main import main
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    factory = zen.scaler._mig_factory
    zen.scaler = ClusterOrchestrator(config, db, clock, factory, policy=Failing())
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a"))
    fn.tick()
    zen.scaler = ClusterOrchestrator(config, db, clock, factory, policy=Nothing())  # passes work again
    fn = FunctionsInvoker(zen)
    for _ in range(5):
        advance(61)
        reports = fn.tick()
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    capsys.readouterr()
    assert main(["explain", "a"]) == 0
    out = capsys.readouterr().out
    assert "scaling pass failed" not in out, out
