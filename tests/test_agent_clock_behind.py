"""An agent whose wall clock runs behind Zen's (``check_seq`` refuses a clock far ahead; one behind is accepted):
what it says happened at its ``sent_at`` is held to Zen's own times. A VM just idle is idle since no earlier than
Zen last heard it busy (else the next pass deletes it as idle long), and a run starts no earlier than its claim
(else `zen jobs list` shows a wait and a duration off by the clock's error)."""

from __future__ import annotations

from datetime import timedelta

from tests.messages import heartbeat, job_request
from tests.scaling.fakes import FakeFleet, RecordingMig
from tests.scaling.test_retired_vms import deletions, instance
from tests.test_functions_lifecycle import job
from tests.test_heartbeat_seq import ms, vm_beat, vm_row
from zen.cli.kit import job_row
from zen.core.config import ClusterConfig
from zen.scaling.manager import ClusterManager
from zen.scaling.model import Timing
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts

BEHIND = timedelta(minutes=30)


def test_a_vm_whose_clock_is_behind_is_not_idle_since_before_zen_heard_it_busy(functions, zen, clock):
    skew_ms = int(BEHIND.total_seconds() * 1000)
    functions.heartbeat(vm_beat("BUSY", ms(clock) - skew_ms, clock() - BEHIND))  # running a job, heard now
    busy_heard = clock()
    clock.advance(5)
    functions.heartbeat(vm_beat("IDLE", ms(clock) - skew_ms, clock() - BEHIND))  # its job ended 5 s ago
    row = vm_row(zen, "vm-b")
    assert row["idle_since"] >= busy_heard, (
        f"idle_since {row['idle_since']} is {(busy_heard - row['idle_since']).total_seconds():.0f} s before "
        f"Zen last heard the VM busy ({busy_heard})")

    # The next scaling pass keeps the VM idle 5 s (it was deleted as "idle for 1800s").
    now = clock()
    agents = {"vm-b": {k: row[k] for k in ("state", "idle_since", "last_seen_at")}}
    calls: list = []
    migs = {"us-central1": RecordingMig("us-central1", calls, 1, [instance("vm-b")])}
    config = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=4, regions=["us-central1"],
                           max_vms_per_region=4, max_vms=4, min_vms=0)
    report = ClusterManager(config, FakeFleet(FleetFacts((), {}, agents, {}, 0), now), migs, lambda: now, Timing(),
                            ZenPlanner(), telemetry=False).run()
    assert deletions(calls) == [], [d.reason for d in report.decisions]


def test_a_run_reported_by_an_agent_behind_never_starts_before_its_claim(functions, zen, clock):
    functions.submit(job_request("j"))
    clock.advance(3 * 86400)  # queued three days
    claim = clock()
    functions.heartbeat(heartbeat("j", "CLAIMED", 1, vm="vm-a", sent_at=(clock() - BEHIND).isoformat()))
    clock.advance(10)
    functions.heartbeat(heartbeat("j", "RUNNING", 2, vm="vm-a", sent_at=(clock() - BEHIND).isoformat()))
    clock.advance(60)
    record = job(zen, "j")
    row = job_row(record, now=clock())
    assert record.started_at >= claim, (
        f"started_at {record.started_at} is before the claim Zen heard at {claim}; "
        f"zen jobs list shows wait {row['wait']} and duration {row['duration']} (ran 1m00s after a 3-day wait)")


def test_a_vm_first_heard_idle_from_a_clock_behind_is_idle_since_one_vm_heartbeat_period_at_most(functions, zen, config, clock):
    skew_ms = int(BEHIND.total_seconds() * 1000)
    functions.heartbeat(vm_beat("IDLE", ms(clock) - skew_ms, clock() - BEHIND))  # its first word: IDLE
    row = vm_row(zen, "vm-b")
    period = timedelta(seconds=config.deadlines.vm_heartbeat_s)
    assert row["idle_since"] >= clock() - period, (
        f"idle_since {row['idle_since']}: idle {(clock() - row['idle_since']).total_seconds():.0f} s by a VM "
        f"Zen first heard now, which says IDLE every {period.total_seconds():.0f} s")
