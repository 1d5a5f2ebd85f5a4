"""A resize whose operation comes back DONE with an error (accepted, then failed: nothing was resized) is a failure:
held as 'not confirmed, counted toward the limits', its size was kept as the pool's last known size."""

from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_scaling_integration import CLUSTER, build_stack
from zen_dev.local.compute import views
from zen_dev.local.compute.world import World
from zen_dev.local.invoke import FunctionsInvoker


def test_a_failed_resize_operation_is_reported_as_failed(config, db, publisher, clock, monkeypatch, tmp_path):
    failing = set()
    real_resize, real_view = World.resize, views.operation_resource

    def resize(self, mig, size, request_id=None):
        if mig.spec.region != "us-central1":
            return real_resize(self, mig, size, request_id)
        op = self._operation(mig, "compute.instanceGroupManagers.resize", request_id)  # accepted; nothing done
        failing.add(op.name)
        return op

    def view(world, op):
        body = real_view(world, op)
        if op.name in failing:
            body.update(status="DONE", error={"errors": [{"code": "RESOURCE_OPERATION_RATE_EXCEEDED",
                                                           "message": "too many operations"}]})
        return body

    monkeypatch.setattr(World, "resize", resize)
    monkeypatch.setattr(views, "operation_resource", view)
    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path,
                                                   capacity={"default": 4})
    try:
        FunctionsInvoker(zen).submit(job_request("a"))
        with db.transaction() as s:
            rows = s.run("recent_scaling_decisions", cluster=CLUSTER, limit=20)
        memory = zen.scaler.manager(CLUSTER).memory()
        reasons = [(r["action"], r["region"], r["reason"]) for r in rows]
        held = [r for a, reg, r in reasons if a == "HOLD" and reg == "us-central1"]
        assert held and "not confirmed" not in held[0], held
        assert memory["us-central1"].sized == 0  # nothing was resized
    finally:
        standin.stop()
