"""A flex-start VM's PREEMPTED at its run's end, read after a scaling pass saw that VM stop (its report redelivered,
or sent late): the attempt ran on the VM the pass recorded as flex-start, so its end names the end of the run
(``zen.jobs.flex_end``). The claim check judges a VM so seen by its name until its MIG's recreation is seen billed
(``JobTx.vm_model``: the recreated VM boots from the template its name now means); read so at the report, a
flex-start VM of the primary MIG, the cluster's models reordered since it booted, was told "was preempted"."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_flex_end_margin import BEAT, RUN_S
from zen.core.config import ZenConfig
from zen.store import fleet, repository

MIXED = "4xa100-40gb"
VM = "zen-4xa100-40gb-us-central1-ab12"  # the primary MIG's, booted while flex-start was the primary model


def _zen(config, db, publisher, clock, models: list[str]):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == MIXED:
            cluster.update(provisioning=models, max_start_wait_s=900, flex_start_min_wait_s=300,
                           flex_start_run_s=RUN_S)
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def test_a_flex_start_vms_run_end_read_after_a_pass_saw_it_stop_is_told_so(config, db, publisher, clock, db_url,
                                                                          monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, functions = _zen(config, db, publisher, clock, ["flex-start", "spot"])
    with before.db.transaction() as session:  # a pass sees the VM RUNNING, as flex-start
        fleet.see_instances(session, MIXED, "us-central1", [VM], clock(), model="flex-start")
    functions.heartbeat(BEAT | {"vm": VM, "seq": 1, "sent_at": clock().isoformat()})
    functions.submit(job_request("j"))
    functions.heartbeat(heartbeat("j", "CLAIMED", 2, vm=VM))
    functions.heartbeat(heartbeat("j", "RUNNING", 3, vm=VM))
    zen, functions = _zen(config, db, publisher, clock, ["spot", "flex-start"])  # the models reordered
    clock.advance(RUN_S - 30)  # its run's end
    with zen.db.transaction() as session:  # a pass sees it stopped: GCE deletes it, its MIG recreates it
        fleet.see_instances(session, MIXED, "us-central1", [VM], clock(), billed=[], model="spot")
    clock.advance(20)
    functions.heartbeat(heartbeat("j", "PREEMPTED", 4, vm=VM, message=f"zen: VM {VM} shut down (SIGTERM)"))
    with zen.db.transaction() as tx:
        [lost] = [r["reason"] for r in repository.all_job_events(tx) if r["to_status"] == "LOST"]
        job = repository.get_job(tx, "j")
    assert job.attempt == 2, job.status
    assert lost.startswith(f"VM {VM} reached the end of its flex-start run"), lost


def test_the_recreated_vms_own_attempt_is_judged_by_its_name(config, db, publisher, clock, db_url, monkeypatch):
    """The VM its MIG made under the name after that stop (the spot template's now) claims, runs and is preempted
    before a pass sees it billed: its attempt began after the stop was seen, so the name tells, not the VM before."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    before, functions = _zen(config, db, publisher, clock, ["flex-start", "spot"])
    with before.db.transaction() as session:
        fleet.see_instances(session, MIXED, "us-central1", [VM], clock(), model="flex-start")
    functions.heartbeat(BEAT | {"vm": VM, "seq": 1, "sent_at": clock().isoformat()})
    zen, functions = _zen(config, db, publisher, clock, ["spot", "flex-start"])
    clock.advance(RUN_S - 30)
    with zen.db.transaction() as session:
        fleet.see_instances(session, MIXED, "us-central1", [VM], clock(), billed=[], model="spot")
    clock.advance(60)
    functions.submit(job_request("j"))
    functions.heartbeat(heartbeat("j", "CLAIMED", 2, vm=VM))
    functions.heartbeat(heartbeat("j", "RUNNING", 3, vm=VM))
    clock.advance(30)
    functions.heartbeat(heartbeat("j", "PREEMPTED", 4, vm=VM, message=f"zen: VM {VM} shut down (SIGTERM)"))
    with zen.db.transaction() as tx:
        [lost] = [r["reason"] for r in repository.all_job_events(tx) if r["to_status"] == "LOST"]
    assert lost == f"VM {VM} was preempted (no attempt spent)", lost
