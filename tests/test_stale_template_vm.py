"""End to end (Compute stand-in, real Postgres, the functions): the operator adds ``hipaa`` to us-west1
(``region_tags``). A VM already in us-west1 booted from the old instance template (the MIG's update policy is
OPPORTUNISTIC: it keeps that template, and its agent reports the template's tags: none). A job requiring hipaa
is narrowed to us-west1. The VM claimed it and was refused ("this VM lacks the job's tags"), again and again;
the planner knows nothing of tags (zen.scaling), so it counted that idle VM as the job's supply: it asked for no
VM with the tags, and never scaled the idle VM down since the queued job "needed" it: the job waited for ever.
A VM refused for tags its region carries now is drained (``claims.refuse_claim``), as a draining VM is no
supply (tests/scaling/test_drained_vms.py): it goes, and a VM of the current template is asked for."""

from __future__ import annotations

import json

import pytest

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, build_stack, vm_beat
from zen.core.config import ZenConfig
from zen.store import repository


@pytest.fixture
def tagged_stack(config, db, publisher, clock, monkeypatch, tmp_path):
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster["region_tags"] = {"us-west1": ["hipaa"]}
    tagged = ZenConfig.model_validate(raw)
    zen, advance, instances, standin = build_stack(tagged, db, publisher, clock, monkeypatch, tmp_path)
    yield zen, advance, instances
    standin.stop()


def status(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id).status.value


def test_a_tagged_job_is_not_left_waiting_on_an_idle_vm_that_lacks_its_tags(tagged_stack, clock):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = tagged_stack
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("plain", regions=["us-west1"]))
    advance(BOOT_S + 1)
    [old] = instances("us-west1")
    seq = 1
    fn.heartbeat(vm_beat(old.name, "us-west1", "IDLE", seq, sent_at=clock().isoformat()))
    fn.heartbeat(heartbeat("plain", "CLAIMED", 1, vm=old.name, region="us-west1", zone=old.zone))
    fn.heartbeat(heartbeat("plain", "SUCCEEDED", 2, vm=old.name, region="us-west1", zone=old.zone, exit_code=0))

    fn.submit(job_request("phi", requires_tags=["hipaa"]))  # narrowed to us-west1, the one region carrying hipaa
    claim = 0
    for _ in range(15):  # 15 minutes of ticks; the old VM claims each copy of the start it pulls
        seq += 1
        fn.heartbeat(vm_beat(old.name, "us-west1", "IDLE", seq, sent_at=clock().isoformat()))
        claim += 1
        fn.heartbeat(heartbeat("phi", "CLAIMED", claim, vm=old.name, region="us-west1", zone=old.zone))  # no tags
        advance(60)
        fn.tick()
        fresh = [i for i in instances("us-west1") if i.name != old.name and i.running]
        for seq_new, vm in enumerate(fresh, start=1):  # a VM from the current template: it carries hipaa
            fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", seq_new, sent_at=clock().isoformat()))
            fn.heartbeat(heartbeat("phi", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone, tags=["hipaa"]))
        if status(zen, "phi") != "QUEUED":
            break
    names = [i.name for i in instances("us-west1")]
    assert status(zen, "phi") == "ASSIGNED", (
        f"job phi still {status(zen, 'phi')} after 15 min; us-west1 holds only {names}: the idle VM without "
        "the tags counts as its supply, no VM with them is asked, and the idle one is never scaled down")
