"""A flex-start VM's run must hold a job's whole attempt, not only its ``max_runtime_s``: the agent stops a job at
``max_runtime_s``, gives it its stop grace, then saves its last checkpoint and uploads its outputs before it reports
(``zen.agent.attempt``). GCE deletes the VM at the end of its run whatever it is doing: a job whose run fitted what
was left, but not its upload after it, was PREEMPTED with its work done and ran again, paid twice
(``tests/agent/test_upload_end.py``). A flex-start VM takes no job whose ``max_runtime_s`` and
``deadlines.flex_end_margin_s`` outlast its run left, and the planner counts the same margin
(``zen.core.provisioning.flex_too_short``): it asks for a VM where the claim would refuse, and counts one the claim
would take."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.messages import heartbeat, job_request
from zen.core.config import ZenConfig
from zen.scaling.flexrun import run_ends_first
from zen.scaling.model import Vm, VmPhase
from zen.scaling.timing import timing_from_config
from zen.store import repository

MIXED = "4xa100-40gb"
RUN_S = 86400  # a flex-start VM's run here (flex_start_run_s)
VM = "zen-4xa100-40gb-us-central1-flex-ab12"
BEAT = {"kind": "vm", "cluster": MIXED, "region": "us-central1", "zone": "us-central1-a", "state": "IDLE"}
FLEX = dict(provisioning="flex-start", max_start_wait_s=600)


def _zen(config, db, publisher, clock, db_url, monkeypatch, **deadlines):
    """Zen with ``MIXED`` using spot, standard and flex-start VMs (day-long runs), and ``deadlines`` set."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    raw["deadlines"].update(deadlines)
    for cluster in raw["clusters"]:
        if cluster["name"] == MIXED:
            cluster.update(provisioning=["spot", "standard", "flex-start"], max_start_wait_s=900,
                           flex_start_min_wait_s=300, flex_start_run_s=RUN_S)
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def _claim_after(functions, zen, job_id: str, max_runtime_s: float) -> tuple[str, str | None, list[str]]:
    """``job_id`` (``max_runtime_s``, flex-start only) submitted and claimed by ``VM``: its status, VM and the
    claims refused."""
    functions.submit(job_request(job_id, max_runtime_s=int(max_runtime_s), **FLEX))
    functions.heartbeat(heartbeat(job_id, "CLAIMED", 2, vm=VM))
    with zen.db.transaction() as tx:
        job = repository.get_job(tx, job_id)
        return job.status.value, job.vm, [r["reason"] for r in repository.list_rejections(tx)]


def test_a_flex_vm_takes_no_job_whose_upload_after_its_max_runtime_outlasts_the_run(config, db, publisher, clock,
                                                                                    db_url, monkeypatch):
    """20 hours into its day-long run the VM has 4 hours left, less the boot estimate. A job that may run 10 minutes
    less fits by its max_runtime_s alone, and was taken: stopped at its max_runtime_s, its stop grace and upload
    then outlasted the run. Now it is refused, naming the margin, and waits for a VM with time for both; a 2-hour
    job still takes the VM."""
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    functions.heartbeat(BEAT | {"vm": VM, "seq": 1, "sent_at": zen.clock().isoformat()})
    zen.clock.advance(20 * 3600)
    left = 4 * 3600 - zen.config.scaling.boot_estimate_s
    status, vm, refused = _claim_after(functions, zen, "fits-alone", left - 600)
    assert (status, vm) == ("QUEUED", None), refused
    [reason] = refused
    assert f"with about {int(left)} s of its run left" in reason and "deadlines.flex_end_margin_s" in reason, reason
    status, vm, _ = _claim_after(functions, zen, "short", 2 * 3600)
    assert (status, vm) == ("ASSIGNED", VM)


def test_the_margin_is_the_configurations(config, db, publisher, clock, db_url, monkeypatch):
    """With ``deadlines.flex_end_margin_s: 0`` (outputs small, no checkpoint) the job whose max_runtime_s fits the
    run left is taken."""
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch, flex_end_margin_s=0)
    functions.heartbeat(BEAT | {"vm": VM, "seq": 1, "sent_at": zen.clock().isoformat()})
    zen.clock.advance(20 * 3600)
    left = 4 * 3600 - zen.config.scaling.boot_estimate_s
    assert _claim_after(functions, zen, "fits", left - 600)[:2] == ("ASSIGNED", VM)


@pytest.mark.parametrize("margin_s", [0, 900, 3600])
@pytest.mark.parametrize("short_of_s", [-60, 60, 900])
def test_the_planner_counts_a_flex_vm_for_a_job_exactly_when_its_claim_would_win(config, db, publisher, clock, db_url,
                                                                                 monkeypatch, margin_s, short_of_s):
    """The same VM and job, just within and just past the margin: the planner's ``run_ends_first`` (which hides
    the VM from the job's demand, ``zen.scaling.flexrun``) says the run ends first exactly when the claim is
    refused. A planner that counted less than the claim kept the job waiting on a VM that refused it; one that
    counted more asked for a VM, billed, that the job did not need."""
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch, flex_end_margin_s=margin_s)
    first = zen.clock()
    functions.heartbeat(BEAT | {"vm": VM, "seq": 1, "sent_at": first.isoformat()})
    zen.clock.advance(20 * 3600)
    left = 4 * 3600 - zen.config.scaling.boot_estimate_s
    runtime = left - margin_s - short_of_s  # short_of_s < 0: the run ends first by that much
    status, _, refused = _claim_after(functions, zen, "j", runtime)
    vm = Vm(VM, "us-central1/flex-start", VmPhase.IDLE, first, first_heard_at=first)
    hidden = run_ends_first(vm, int(runtime), RUN_S, timing_from_config(zen.config), zen.clock())
    assert (status == "QUEUED", hidden) == (short_of_s < 0, short_of_s < 0), refused


def test_a_job_naming_no_max_runtime_takes_no_flex_vm_within_the_margin_of_its_end(config, db, publisher, clock,
                                                                                   db_url, monkeypatch):
    """A job that names no ``max_runtime_s`` was held to nothing: a VM minutes from its run's end took it, GCE cut it
    there, and it ran again, the VM's last minutes billed for nothing. Now it is held to the margin alone (refused
    within it, as the planner counts it: ``run_ends_first``), and still takes a VM with more left."""
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    first = zen.clock()
    functions.heartbeat(BEAT | {"vm": VM, "seq": 1, "sent_at": first.isoformat()})
    margin = zen.config.deadlines.flex_end_margin_s
    zen.clock.advance(RUN_S - zen.config.scaling.boot_estimate_s - margin + 60)  # 60 s within the margin
    functions.submit(job_request("unbounded"))  # any model: flex-start too
    functions.heartbeat(heartbeat("unbounded", "CLAIMED", 2, vm=VM))
    with zen.db.transaction() as tx:
        job, refused = repository.get_job(tx, "unbounded"), [r["reason"] for r in repository.list_rejections(tx)]
    assert (job.status.value, job.vm) == ("QUEUED", None), refused
    assert "the job names no max_runtime_s" in refused[-1], refused
    vm = Vm(VM, "us-central1/flex-start", VmPhase.IDLE, first, first_heard_at=first)
    assert run_ends_first(vm, 0, RUN_S, timing_from_config(zen.config), zen.clock())  # the planner's view alike


def test_a_job_naming_no_max_runtime_still_takes_a_flex_vm_with_time_left(config, db, publisher, clock, db_url,
                                                                          monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    functions.heartbeat(BEAT | {"vm": VM, "seq": 1, "sent_at": zen.clock().isoformat()})
    zen.clock.advance(20 * 3600)
    functions.submit(job_request("unbounded"))  # any model: flex-start too
    functions.heartbeat(heartbeat("unbounded", "CLAIMED", 2, vm=VM))
    with zen.db.transaction() as tx:
        job = repository.get_job(tx, "unbounded")
    assert (job.status.value, job.vm) == ("ASSIGNED", VM)
