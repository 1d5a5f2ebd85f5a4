"""An attempt whose VM went silent because the cloud took it is counted as a preemption, not as the job's silence.

A spot VM preempted with its agent's PREEMPTED lost (30 s of notice), or a flex-start VM deleted at its run's end,
left its attempt to the lost-job sweep, which spent one of the job's attempts: a job of max_attempts 1 FAILED after
one spot preemption. The scaling passes had seen the VM stop (listed, no longer billed) or leave its MIG after the
attempt's last report, Zen deleting none of it. Now such an attempt is requeued unspent, as a PREEMPTED report's is
(``zen.jobs.cloud_silence``); a VM still running, silent, spends one as before. Through the functions, the scaling
passes' rows written as a pass writes them (``fleet.see_instances``), against a real Postgres."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from zen.core.config import ZenConfig
from zen.store import fleet, repository

CLUSTER = "4xa100-40gb"
SPOT_VM = "zen-4xa100-40gb-us-central1-ab12"  # the primary (spot) MIG's
FLEX_VM = "zen-4xa100-40gb-us-central1-flex-cd34"
RUN_S = 86400  # a flex-start VM's run here (flex_start_run_s)


def _zen(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster.update(provisioning=["spot", "standard", "flex-start"], flex_start_run_s=RUN_S)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen = Zen(ZenConfig.model_validate(raw), db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def _pass(zen, pool: str, names: list[str], billed: list[str], model: str) -> None:
    """A scaling pass lists ``pool``'s instances now, ``billed`` those GCE bills."""
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, pool, names, zen.clock(), billed=billed, model=model)


def _claimed(functions, vm: str) -> None:
    functions.submit(job_request("j", cluster=CLUSTER, max_attempts=1))
    functions.heartbeat(heartbeat("j", "CLAIMED", 1, vm=vm))


def _silent_after(zen, functions, vm: str, *passes, claimed: bool = False) -> tuple[str, int, int, str]:
    """Job ``j`` (max_attempts 1) run by ``vm`` (``claimed`` already: ``_claimed``), then silent; ``passes``: what the
    passes see after its last report, one at each tick, 50 s apart. Ticks until the sweep has judged it: its status,
    attempt, budget, last history row."""
    zen.clock.advance(30)  # the last pass's sight of the VM billed came before the job's last report
    if not claimed:
        _claimed(functions, vm)
    functions.heartbeat(heartbeat("j", "RUNNING", 2, vm=vm))
    functions.tick()
    for n in range(4):
        zen.clock.advance(50)
        if n < len(passes):
            passes[n]()
        functions.tick()
    with zen.db.transaction() as tx:
        job = repository.get_job(tx, "j")
        last = repository.job_history(tx, "j")[-1]["reason"]
    return job.status.value, job.attempt, job.max_attempts, last


def test_a_job_whose_spot_vm_a_pass_saw_stopped_is_requeued_unspent(config, db, publisher, clock, db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    _pass(zen, "us-central1", [SPOT_VM], [SPOT_VM], "spot")
    status, attempt, max_attempts, last = _silent_after(  # preempted: listed, TERMINATED (its MIG recreates it)
        zen, functions, SPOT_VM, lambda: _pass(zen, "us-central1", [SPOT_VM], [], "spot"))
    assert (status, attempt, max_attempts) == ("QUEUED", 2, 2), (status, attempt, max_attempts, last)
    with zen.db.transaction() as tx:
        [lost] = [r["reason"] for r in repository.all_job_events(tx) if r["to_status"] == "LOST"]
        assert repository.get_job(tx, "j").preemptions == 1
    assert lost == (f"no heartbeat from {SPOT_VM} for 120s, and a scaling pass saw its spot VM stopped since, not "
                    "deleted by Zen: taken as preempted (no attempt spent)"), lost


def test_a_job_whose_spot_vm_its_mig_recreated_before_the_sweep_is_requeued_unspent(config, db, publisher, clock,
                                                                                     db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    _pass(zen, "us-central1", [SPOT_VM], [SPOT_VM], "spot")
    status, attempt, _, last = _silent_after(  # preempted, then RUNNING again under its name by the sweep's tick
        zen, functions, SPOT_VM, lambda: _pass(zen, "us-central1", [SPOT_VM], [], "spot"),
        lambda: _pass(zen, "us-central1", [SPOT_VM], [SPOT_VM], "spot"))
    assert (status, attempt) == ("QUEUED", 2), (status, attempt, last)


def test_a_job_whose_spot_vm_runs_on_silent_spends_its_attempt(config, db, publisher, clock, db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    _pass(zen, "us-central1", [SPOT_VM], [SPOT_VM], "spot")
    status, _, _, last = _silent_after(  # listed RUNNING still: its agent or its network went silent, not the VM
        zen, functions, SPOT_VM, lambda: _pass(zen, "us-central1", [SPOT_VM], [SPOT_VM], "spot"))
    assert status == "FAILED" and last.endswith(f"the last: no heartbeat from {SPOT_VM} for 120s"), (status, last)


def test_a_job_whose_flex_start_vm_left_its_mig_at_its_runs_end_is_requeued_unspent(config, db, publisher, clock,
                                                                                    db_url, monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    pool = "us-central1/flex-start"
    _pass(zen, pool, [FLEX_VM], [FLEX_VM], "flex-start")
    _claimed(functions, FLEX_VM)  # with its run ahead (a job naming no max_runtime_s takes none near its end)
    zen.clock.advance(RUN_S - 120)  # run since (no tick meanwhile), to its VM's last minutes
    _pass(zen, pool, [FLEX_VM], [FLEX_VM], "flex-start")
    status, attempt, max_attempts, last = _silent_after(  # GCE deleted it at its run's end: gone from its MIG
        zen, functions, FLEX_VM, lambda: _pass(zen, pool, [], [], "flex-start"), claimed=True)
    assert (status, attempt, max_attempts) == ("QUEUED", 2, 2), (status, attempt, max_attempts, last)
    with zen.db.transaction() as tx:
        [lost] = [r["reason"] for r in repository.all_job_events(tx) if r["to_status"] == "LOST"]
    assert lost.startswith(f"no heartbeat from {FLEX_VM} for 120s, and a scaling pass saw its flex-start VM left its "
                           "MIG since, about 90 s of its run left"), lost


def test_a_job_whose_flex_start_vm_left_its_mig_mid_run_spends_its_attempt(config, db, publisher, clock, db_url,
                                                                           monkeypatch):
    zen, functions = _zen(config, db, publisher, clock, db_url, monkeypatch)
    pool = "us-central1/flex-start"
    _pass(zen, pool, [FLEX_VM], [FLEX_VM], "flex-start")
    zen.clock.advance(RUN_S / 2)
    _pass(zen, pool, [FLEX_VM], [FLEX_VM], "flex-start")
    status, _, _, _ = _silent_after(zen, functions, FLEX_VM, lambda: _pass(zen, pool, [], [], "flex-start"))
    assert status == "FAILED"
