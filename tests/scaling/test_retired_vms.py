"""VMs whose agent retired them (RETIRED: a pull limit, issue 15, or a fault of the VM's own): not supply for queued jobs, deleted once
they hold no job, with the reason; a claim from one is refused. First through the manager's
recording fakes, then end to end (Compute stand-in, real Postgres, the heartbeat function)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from tests.messages import heartbeat, job_request
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_manager_apply import Fixed
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, stack, vm_beat, vm_claiming  # noqa: F401 - the fixture
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Action, Decision, DemandGroup, Plan, Timing, VmPhase
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance
from zen.store import repository

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
FAULTS = ("or a fault of the VM's own (docker, its GPUs, its disk, a container left running; its agent's log says "
          "which)")
REASON = f"its agent retired it (it takes no more jobs): its pull limit (2 jobs / 40 GPU-hours in 24 h) reached, {FAULTS}"
OWN = f"its agent retired it (it takes no more jobs): its pull limit (set on the VM) reached, {FAULTS}"


def instance(name: str, action: str = "NONE") -> MigInstance:
    return MigInstance(name, "us-central1-a", action, "RUNNING", None)


def manager(policy, *, instances: list[MigInstance], states: dict[str, str], held: dict[str, str] | None = None,
            demand=(), heard_at: datetime = NOW, **limits):
    calls: list = []
    agents = {name: {"state": state, "idle_since": NOW if state == "IDLE" else None, "last_seen_at": heard_at}
              for name, state in states.items()}
    migs = {"us-central1": RecordingMig("us-central1", calls, len(instances), instances),
            "us-west1": RecordingMig("us-west1", calls)}
    fleet = FakeFleet(FleetFacts(tuple(demand), held or {}, agents, {}, 0), NOW)
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=4, regions=["us-central1", "us-west1"],
                           max_vms_per_region=4, max_vms=4,
                           **(limits or {"max_jobs_per_vm_day": 2, "max_gpu_hours_per_vm_day": 40}))
    return ClusterManager(config, fleet, migs, lambda: NOW, Timing(), policy), calls, fleet


def deletions(calls: list) -> list:
    return [c for c in calls if c[0] == "delete_instances"]


def test_a_retired_idle_vm_is_deleted_with_the_reason_and_a_retired_busy_one_is_kept():
    m, calls, fleet = manager(Fixed(Plan()), instances=[instance("idle-r"), instance("busy-r"), instance("idle")],
                              states={"idle-r": "RETIRED", "busy-r": "RETIRED", "idle": "IDLE"},
                              held={"busy-r": "job-1"})

    report = m.run()

    assert deletions(calls) == [("delete_instances", "us-central1", ["idle-r"])]
    assert report.deleted == ["idle-r"] and fleet.drained == ["idle-r"]
    assert report.decisions == [Decision(Action.DELETE, "us-central1", REASON, vm="idle-r")]
    assert fleet.recorded[0][1] == report.decisions  # in scaling_decisions, as the planner's are
    phases = {vm.name: vm.phase for vm in m.policy.snapshots[0].vms}
    assert phases == {"idle-r": VmPhase.DELETING, "busy-r": VmPhase.DELETING, "idle": VmPhase.IDLE}


def test_a_retired_vm_is_deleted_once_whether_the_plan_or_its_mig_deletes_it_already():
    planned = Plan(delete=[("us-central1", "r1")], decisions=[Decision(Action.DELETE, "us-central1", "planned", vm="r1")])
    m, calls, _ = manager(Fixed(planned), instances=[instance("r1"), instance("r2", "DELETING")],
                          states={"r1": "RETIRED", "r2": "RETIRED"})

    report = m.run()

    assert deletions(calls) == [("delete_instances", "us-central1", ["r1"])]
    assert [d.reason for d in report.decisions] == ["planned"]
    assert planned.delete == [("us-central1", "r1")]  # the policy's plan itself is left as it was


def test_without_configured_limits_the_reason_says_the_limit_was_the_vms_own():
    m, _, _ = manager(Fixed(Plan()), instances=[instance("r")], states={"r": "RETIRED"},
                      max_jobs_per_vm_day=None)
    assert [d.reason for d in m.run().decisions] == [OWN]


def test_a_vm_retired_by_a_fault_is_not_said_to_have_reached_a_pull_limit():
    """An agent retires its VM past a pull limit, or for a fault of the VM's own (a GPU check failed, docker could
    not remove a container, its disk failed stagings: ``DailyPulls.retire``), and its RETIRED says no why. In a
    cluster with no pull limit at all, the deletion said "reached its pull limit (set on the VM)": false for a VM
    whose GPU check failed after its first job."""
    m, _, _ = manager(Fixed(Plan()), instances=[instance("r")], states={"r": "RETIRED"}, max_jobs_per_vm_day=None)
    [why] = [d.reason for d in m.run().decisions]
    assert not why.startswith("reached its pull limit") and "or a fault of the VM's own" in why


def test_a_drained_vm_whose_agent_then_retired_is_said_drained_not_at_a_pull_limit():
    """A scale-down drained the VM (its claims refused ``draining``: its agent retires, RETIRED) and the delete
    failed: the next pass deletes it again, saying so, not that it reached a pull limit."""
    m, calls, fleet = manager(Fixed(Plan()), instances=[instance("d")], states={"d": "RETIRED"})
    fleet._facts = replace(fleet._facts, drained=frozenset({"d"}))

    report = m.run()

    assert deletions(calls) == [("delete_instances", "us-central1", ["d"])]
    assert [d.reason for d in report.decisions] == [
        "drained for a scale-down but still in its MIG (the delete failed): deleted again"]


def test_a_retired_vm_is_no_supply_the_planner_asks_for_another_vm_for_the_queued_job():
    demand = [DemandGroup(("us-central1", "us-west1"), 1, NOW, 0)]
    m, calls, _ = manager(ZenPlanner(), instances=[instance("r")], states={"r": "RETIRED"}, demand=demand)

    report = m.run()

    assert sum(report.added.values()) >= 1 and report.deleted == ["r"]
    assert any(d.action is Action.DELETE and d.vm == "r" and d.reason == REASON for d in report.decisions)


# -- end to end ------------------------------------------------------------------------------------------
def test_a_retired_vm_refuses_claims_is_deleted_by_the_next_pass_and_its_work_goes_elsewhere(stack, clock, publisher):
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances = stack
    fn = FunctionsInvoker(zen)
    vm = vm_claiming(fn, stack)
    fn.heartbeat(heartbeat("a", "SUCCEEDED", 2, vm=vm.name, region="us-west1", zone=vm.zone, exit_code=0))
    fn.submit(job_request("b", regions=["us-west1"]))  # while the VM is idle: it covers b

    fn.heartbeat(vm_beat(vm.name, "us-west1", "RETIRED", 2))  # its agent reached its limit
    with zen.db.transaction() as session:
        [row] = repository.list_vms(session)
        assert (row["name"], row["state"]) == (vm.name, "RETIRED")
        assert session.sql("SELECT name FROM vm_drains") == []  # no pass has seen it yet
    # A claim that slipped out anyway is refused, and b's start message goes out again for another VM.
    starts = len(publisher.on("zen-job-start"))
    fn.heartbeat(heartbeat("b", "CLAIMED", 1, vm=vm.name, region="us-west1", zone=vm.zone))
    assert repository_job(zen, "b").status.value == "QUEUED"
    controls = [json.loads(m.data) for m in publisher.on("zen-vm-control")]
    assert (vm.name, "b", "RELEASE") in [(c["vm"], c["job_id"], c["action"]) for c in controls]
    assert len(publisher.on("zen-job-start")) == starts + 1

    fn.tick()

    west = [i.name for i in instances("us-west1") if not i.deleting]
    assert vm.name not in west and len(west) == 1  # deleted; a new VM asked for b
    with zen.db.transaction() as session:
        decisions = session.run("recent_scaling_decisions", cluster=CLUSTER, limit=50)
    [deleted] = [d for d in decisions if d["action"] == "DELETE" and d["vm"] == vm.name]
    assert deleted["reason"] == OWN


def repository_job(zen, job_id: str):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def test_a_vm_whose_agent_said_stopping_and_went_silent_while_it_runs_is_deleted():
    """Its agent said STOPPING (the VM going away) and nothing since, and the instance still runs: it
    was DELETING for the planner (no supply), and nobody deleted it: billed for ever. Past the silence
    deadline, and holding no job, it is deleted with the reason; one heard lately is left to go."""
    from datetime import timedelta

    m, calls, _ = manager(Fixed(Plan()), instances=[instance("gone"), instance("going")],
                          states={"gone": "STOPPING", "going": "STOPPING"})
    agents = m._fleet.facts("c", NOW).agents
    agents["gone"]["last_seen_at"] = NOW - timedelta(seconds=Timing().agent_silence_s + 1)

    report = m.run()

    assert deletions(calls) == [("delete_instances", "us-central1", ["gone"])]
    assert [d.reason for d in report.decisions] == [
        f"its agent said it was shutting down, then nothing for {Timing().agent_silence_s:g}s, and it still runs"]


def test_a_vm_still_running_a_job_that_ended_long_since_is_deleted():
    """The user stopped the job; its VM never got the STOP (its control path broken) and keeps running it: its
    agent says BUSY, no job in the database holds the VM, and it is heard all the time. It was never deleted (the
    job's own max_runtime_s, 7 days by default, bounded it). Past the silence deadline after the job ended, it goes,
    with the reason; one whose job ended lately, or that runs a job not ended (a claim), is left."""
    from datetime import timedelta

    m, calls, _ = manager(Fixed(Plan()), instances=[instance("zombie"), instance("lately"), instance("claiming")],
                          states={"zombie": "BUSY", "lately": "BUSY", "claiming": "BUSY"})
    agents = m._fleet.facts("c", NOW).agents
    silence = Timing().agent_silence_s
    agents["zombie"].update(job_id="j-1", job_ended_at=NOW - timedelta(seconds=silence + 1))
    agents["lately"].update(job_id="j-2", job_ended_at=NOW - timedelta(seconds=silence - 10))
    agents["claiming"].update(job_id="j-3", job_ended_at=None)

    report = m.run()

    assert deletions(calls) == [("delete_instances", "us-central1", ["zombie"])]
    [why] = [d.reason for d in report.decisions]
    assert why.startswith("its agent still runs a job that ended at ") and "no STOP of Zen's reached it" in why
    assert "j-1" not in why  # a decision is every console viewer's (the clusters page, a queued job's page): no job's id


def test_the_fleet_read_says_when_the_job_a_busy_agent_names_ended(functions, zen, clock):
    """What ``leftovers`` reads (``zen.store.fleet.agents``): the job the agent's last VM heartbeat names, and
    when it ended in the database (None while it has not)."""
    from zen.store import fleet

    functions.submit(job_request("j-1"))
    functions.heartbeat(heartbeat("j-1", "CLAIMED", 1, vm="vm-b"))
    functions.heartbeat(heartbeat("j-1", "RUNNING", 2, vm="vm-b"))

    def busy(seq: int) -> dict:  # as an agent running j-1 says (zen.agent.reports.Reports.vm)
        return {"version": 1, "kind": "vm", "vm": "vm-b", "cluster": "4xa100-40gb", "region": "us-central1",
                "zone": "us-central1-a", "state": "BUSY", "seq": seq, "sent_at": clock().isoformat(),
                "job_id": "j-1", "attempt": 1}

    functions.heartbeat(busy(3))
    with zen.db.transaction() as session:
        assert fleet.agents(session, "4xa100-40gb")["vm-b"]["job_ended_at"] is None
    functions.stop({"job_id": "j-1"})
    clock.advance(zen.config.deadlines.stop_timeout_s + 1)
    functions.tick()  # no answer to the STOP: the sweep ends it
    functions.heartbeat(busy(4))
    with zen.db.transaction() as session:
        job = repository.get_job(session, "j-1")
        assert job.status.value == "CANCELLED"
        assert fleet.agents(session, "4xa100-40gb")["vm-b"]["job_ended_at"] == job.finished_at


def test_an_instance_gce_holds_halted_after_its_agent_spoke_is_deleted_without_striking_its_region():
    """A VM that ran (its agent spoke) and that GCE now holds TERMINATED, SUSPENDED or under repair, its MIG doing
    nothing about it: it was taken for a boot stuck after it got capacity, deleted five passes later "its agent was
    never heard", and its region struck as one whose VMs never come up (blocks growing to hours after three)."""
    halted = [MigInstance(name, "us-central1-a", "NONE", status, None)
              for name, status in (("stopped", "TERMINATED"), ("suspended", "SUSPENDED"), ("repairing", "REPAIRING"))]
    booting = MigInstance("booting", "us-central1-a", "CREATING", "STAGING", None)  # a boot: no agent yet, left
    m, calls, _ = manager(Fixed(Plan()), instances=[*halted, booting],  # (heard since: a host event's restart may
                          states={"stopped": "IDLE", "suspended": "BUSY", "repairing": "IDLE"},  # come, see
                          heard_at=NOW - timedelta(hours=1))  # tests/scaling/test_standard_vm_restarting.py)

    report = m.run()

    assert deletions(calls) == [("delete_instances", "us-central1", ["repairing", "stopped", "suspended"])]
    reasons = {d.vm: d.reason for d in report.decisions}
    assert reasons["stopped"].startswith("its instance is TERMINATED (stopped, suspended or under repair")
    assert not [d for d in report.decisions if d.action in (Action.BLOCK,)]
