"""End to end: a two-node job (examples/two-nodes.yaml) on the whole local stack, on two real agents of two
stand-in VMs: both nodes start only once both claimed, find each other (rank 0 listens on MASTER_PORT,
every rank connects and reports its NODE_RANK), and succeed; and, with one node's VM preempted mid-run,
the whole gang goes back to the queue as one new attempt, every node of the first attempt stopped, and
succeeds; and a gang whose first node claimed in a region that then stocks out is released at the next
tick (for the stockout or for the region's room, not at its assembly deadline) and assembles in the other region. Run alone with `pytest -m e2e`."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.stack_support import running_stack, submit_as

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).parents[2] / "examples" / "two-nodes.yaml"
CONFIG = """
project: zen-gangs
clusters:
  - name: 1xl4
    gpu_type: nvidia-l4
    gpu_count: 1
    machine_type: g2-standard-8
    regions: [us-central1, us-west1]
    max_vms_per_region: 3
    max_vms: 3
    provisioning: [spot]
deadlines:
  heartbeat_timeout_s: 20
  boot_timeout_s: 120
  idle_timeout_s: 60
  stop_timeout_s: 30
  agent_heartbeat_s: 2
  stop_grace_s: 8               # a node that ignores SIGTERM runs on this long after its STOP (the preemption test)
scaling:
  boot_estimate_s: 5
  keep_factor: 1000             # an idle VM is kept to idle_timeout_s unless its name draws u < 0.007 (ski rental's
                                # keep is random per VM, down to 0 s): the warm job's VM must be there for the gang
gangs:
  assemble_s: 120
  port: 32000                   # MASTER_PORT away from the ports other tests' stacks take (21000-30000)
  ports: 500
"""
SCENARIO = """
project: zen-gangs
seed: 5
time_scale: 10
capacity:
  default: 4
  schedule:                     # us-west1 holds one VM at most
    - {at_s: 0, zone: us-west1-a, capacity: 1}
    - {at_s: 0, zone: us-west1-b, capacity: 0}
    - {at_s: 0, zone: us-west1-c, capacity: 0}
timings:
  boot: {dist: fixed, s: 40}
  retry_interval_s: 30
  delete_s: 10
  preempt_stop_s: 20
"""


def _request(job_id: str, work_s: int, regions: tuple[str, ...] = ("us-central1",)) -> dict:
    request = yaml.safe_load(EXAMPLE.read_text())
    request.update(job_id=job_id, user_id="demo", command=[sys.executable, *request["command"][1:]],
                   env={"WORK_S": str(work_s)}, regions=list(regions))
    return request


def _until(what, timeout_s: float, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (found := what()) is not None:
            return found
        time.sleep(every_s)
    return None


def _output(logs: Path, job_id: str) -> list[dict]:
    return [json.loads(line) for path in sorted((logs / job_id).glob("attempt-*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def gang_stack(home, stack_forks):
    from zen.store.db import Database

    with running_stack(home, CONFIG, SCENARIO, start=31000, forks=stack_forks) as stack:
        yield (stack, lambda request: submit_as(stack, "demo", request), Database.from_env(),
               Path(os.environ["ZEN_JOB_LOGS_DIR"]))


def _job(db, job_id):
    from zen.store import repository

    with db.transaction() as session:
        return repository.get_job(session, job_id), repository.job_history(session, job_id)


def test_a_node_preempted_mid_run_requeues_the_gang_as_one_new_attempt_that_succeeds(gang_stack):
    from zen_dev.demo import _preempt

    stack, submit, db, logs = gang_stack
    request = _request("pair-2", work_s=300)  # the first attempt would work 5 minutes; its rerun resumes at once
    # Attempt 1's rank 0 ignores its STOP (SIGTERM) and says it is alive every 0.25 s until the grace's SIGKILL:
    # the next attempt must not start before it is gone (its other node stopped first, zen.core.gang).
    script = request["command"][-1]
    marker = "\nmaster, port = "
    request["command"][-1] = script.replace(marker, (
        "\nif rank == 0 and not os.environ.get('ZEN_PREEMPTED'):\n"
        "    import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    def alive():\n"
        "        while True: print('alive', flush=True); time.sleep(0.25)\n"
        "    threading.Thread(target=alive, daemon=True).start()") + marker, 1)
    assert request["command"][-1] != script
    submit(request)

    def both_met():
        lines = [e for e in _output(logs, "pair-2") if "rendezvous at" in e["text"] and e["attempt"] == 1]
        return lines if len(lines) == 2 else None

    assert _until(both_met, 150) is not None, _job(db, "pair-2")
    first, _ = _job(db, "pair-2")
    assert first is not None and first.status.value == "RUNNING" and first.attempt == 1
    victim = first.gang[1]
    _preempt("zen-gangs", victim.zone, victim.vm)  # GCE's simulateMaintenanceEvent on rank 1's spot VM
    preempted = time.monotonic()
    job = _until(lambda: (j := _job(db, "pair-2")[0]) is not None and j.status.terminal and j or None, 240)
    job, history = _job(db, "pair-2")
    entries = _output(logs, "pair-2")
    assert job is not None and (job.status.value, job.attempt) == ("SUCCEEDED", 2), (job, history)
    steps = [(row["attempt"], row["to_status"], row["reason"]) for row in history if row["to_status"]]
    lost = [s for s in steps if s[1] == "LOST"]
    assert len(lost) == 1 and lost[0][0] == 1 and victim.vm in lost[0][2], steps
    assert [s[:2] for s in steps].count((2, "ASSIGNED")) == 1  # one new attempt for the whole gang
    # Every node of attempt 1 ended (its agent's final output entry), none ran on into attempt 2.
    ended = {e["vm"] for e in entries if e["attempt"] == 1 and e.get("final")}
    assert ended == {n.vm for n in first.gang}, (ended, entries)
    assert not [e for e in entries if e["attempt"] == 1 and " done" in e["text"]]  # cut short on both nodes
    met = [e["text"] for e in entries if e["attempt"] == 2 and "rendezvous at" in e["text"]]
    assert len(met) == 2 and all(text.endswith("heard ranks [0, 1]") for text in met), met
    assert [(n.status, n.exit_code) for n in job.gang] == [("SUCCEEDED", 0), ("SUCCEEDED", 0)]
    last_of_1 = max(e["time"] for e in entries if e["attempt"] == 1 and not e.get("final"))
    first_of_2 = min(e["time"] for e in entries if e["attempt"] == 2)
    assert last_of_1 < first_of_2, (last_of_1, first_of_2)  # never both at once
    print(f"pair-2: preemption to SUCCEEDED (attempt 2) in {time.monotonic() - preempted:.1f} s; "
          f"nodes {[n.vm for n in first.gang]} then {[n.vm for n in job.gang]}; history: {steps}")


def test_a_gang_whose_region_stocks_out_is_released_early_and_assembles_in_the_other_region(gang_stack):
    stack, submit, db, logs = gang_stack
    submit(dict(job_id="warm-3", user_id="demo", cluster="1xl4", regions=["us-west1"], max_runtime_s=60,
                command=[sys.executable, "-c", "print('warm')"]))
    warm = _until(lambda: (j := _job(db, "warm-3")[0]) is not None and j.status.terminal and j or None, 120)
    assert warm is not None and warm.status.value == "SUCCEEDED", _job(db, "warm-3")
    began = time.monotonic()  # its VM idles in us-west1, which has room for no other
    submit(_request("pair-3", work_s=1, regions=("us-west1", "us-central1")))
    job = _until(lambda: (j := _job(db, "pair-3")[0]) is not None and j.status.terminal and j or None, 200)
    job, history = _job(db, "pair-3")
    reasons = [(row["attempt"], row["to_status"], row["reason"]) for row in history]
    assert job is not None and job.status.value == "SUCCEEDED", reasons
    # Released at a tick, not at the deadline: for the stockout, or, where the planner's last pass already
    # saw us-west1's one VM busy or idle and no room under its limits, for room (whichever the tick sees first).
    early = ("us-west1 is stocked out: ", "us-west1 has room for 0 more of the 1 VM(s) the gang needs (its limits): ")
    released = [r for _, _, r in reasons if r and r.startswith(early) and ": 1 of 2 nodes claimed" in r]
    assert len(released) == 1 and "its start sent to us-central1 first" in released[0], reasons
    assert not [r for _, _, r in reasons if r and "not complete within" in r], reasons  # not at the deadline
    assembled = [(a, r) for a, s, r in reasons if s == "ASSIGNED"]
    assert len(assembled) == 1 and assembled[0][1].startswith("gang complete: 2 nodes in us-central1"), reasons
    assert job.attempt == assembled[0][0] > 1 and job.max_attempts > 3  # the release spent no attempt
    print(f"pair-3: submitted to SUCCEEDED in {time.monotonic() - began:.1f} s; history: {reasons}")


def test_two_nodes_find_each_other_and_one_that_ends_first_does_not_make_the_gang_look_silent(gang_stack):
    """Both nodes start once both claimed and find each other (rank 0 listens on MASTER_PORT, every rank
    connects and reports its NODE_RANK). Rank 0 then ends; rank 1 works on, heartbeating, for longer than
    heartbeat_timeout_s (20 s here). The gang is one attempt that succeeds: the sweep once took rank 0's
    final report for silence, called the running gang lost and ran it again."""
    stack, submit, db, logs = gang_stack
    request = _request("pair-4", work_s=32)
    request["command"][-1] = request["command"][-1].replace('time.sleep(0 if os.environ.get("ZEN_PREEMPTED")',
                                                            'time.sleep(0 if rank == 0')
    assert "time.sleep(0 if rank == 0" in request["command"][-1]
    submit(request)
    job = _until(lambda: (j := _job(db, "pair-4")[0]) is not None and j.status.terminal and j or None, 240)
    job, history = _job(db, "pair-4")
    steps = [(row["attempt"], row["to_status"], row["reason"]) for row in history if row["to_status"]]
    assert job is not None and (job.status.value, job.attempt) == ("SUCCEEDED", 1), steps
    assert not [s for s in steps if s[1] == "LOST"], steps
    done = [e["vm"] for e in _output(logs, "pair-4") if " done" in e["text"]]
    assert sorted(done) == sorted(n.vm for n in job.gang), done
    ranks = {e["vm"]: e["text"] for e in _output(logs, "pair-4") if "rendezvous at" in e["text"]}
    assert len(ranks) == 2 and {n.vm for n in job.gang} == set(ranks), (ranks, job.gang)
    by_rank = {n.rank: ranks[n.vm] for n in job.gang}
    port = by_rank[0].split("rendezvous at 127.0.0.1:")[1].split(",")[0]
    assert by_rank[0].startswith("node 0 of 2 (127.0.0.1,127.0.0.1): rendezvous at 127.0.0.1:")
    assert by_rank[1].startswith(f"node 1 of 2 (127.0.0.1,127.0.0.1): rendezvous at 127.0.0.1:{port}")
    assert all(text.endswith("heard ranks [0, 1]") for text in ranks.values()), ranks
    assert [(n.status, n.exit_code) for n in job.gang] == [("SUCCEEDED", 0), ("SUCCEEDED", 0)]
    assembled = next(reason for _, status, reason in steps if status == "ASSIGNED")
    assert assembled.startswith("gang complete: 2 nodes in us-central1"), steps
