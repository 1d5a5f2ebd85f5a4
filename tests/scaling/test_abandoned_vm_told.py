"""A VM taken out of its MIG while it runs (``abandonInstances``, by an operator or a tool): no pass lists it again,
so none deletes it, its claims are refused (a pass saw it leave: ``vm_is_draining``) and its agent retires, idle,
billed until someone deletes it by hand. Zen heard it say so every minute and told nobody. A VM heartbeat sent well
after a pass saw its VM leave its MIG, from a VM no MIG lists, is logged at ERROR, naming the VM, its zone and its
price (Compute stand-in through the official client, real Postgres, the functions)."""

from __future__ import annotations

import logging

from tests.scaling.test_scaling_integration import _jobs, build_stack, idle_after_a_job, vm_beat

REGION = "us-west1"


def _abandon(standin, name: str) -> None:
    """What Compute's ``abandonInstances`` does: the instance leaves its MIG (whose target size drops by one) and
    runs on, its VM untouched."""
    [mig] = [m for m in standin.world.migs.values() if name in m.instances]
    mig.instances.pop(name)
    mig.target_size -= 1


def test_a_vm_heard_after_it_left_its_mig_is_told_to_the_operator(config, db, publisher, clock, monkeypatch,
                                                                  tmp_path, caplog):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    try:
        fn = FunctionsInvoker(zen)
        vm = idle_after_a_job(fn, (zen, advance, instances), clock)
        _abandon(standin, vm.name)
        advance(10)
        fn.tick()  # the pass sees it gone from its MIG
        assert instances(REGION) == [] and [j.status.value for j in _jobs(zen)] == ["SUCCEEDED"]

        caplog.set_level(logging.INFO)
        fn.heartbeat(vm_beat(vm.name, REGION, "IDLE", 3, sent_at=clock().isoformat()))  # sent as it went: no word
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
        for seq in (4, 5):  # its agent goes on: idle, then retired (its claims refused), heard every minute
            advance(zen.config.deadlines.vm_heartbeat_s)
            fn.tick()
            fn.heartbeat(vm_beat(vm.name, REGION, "IDLE" if seq == 4 else "RETIRED", seq, sent_at=clock().isoformat()))
        told = [r for r in caplog.records if r.levelno >= logging.ERROR and getattr(r, "vm", None) == vm.name]
        assert told, caplog.text
        assert vm.zone in told[-1].getMessage() and "$" in told[-1].getMessage(), told[-1].getMessage()
        assert getattr(told[-1], "cluster", None) == "4xa100-40gb"
    finally:
        standin.stop()
