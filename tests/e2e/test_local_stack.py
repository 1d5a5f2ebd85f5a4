"""End to end: the whole local stack (Postgres, Pub/Sub and Compute stand-ins, four functions under
functions-framework, the event bridge and ticker, real agents on the simulated VMs), driven as a
user would, through the official Pub/Sub client. Run alone with `pytest -m e2e`."""

from __future__ import annotations

import socket
from datetime import datetime

import pytest

from zen_dev import demo
from tests.stack_support import free_base_port
from zen_dev.local.stack import LocalStack, Ports, StackError, read_stack

pytestmark = pytest.mark.e2e




def test_jobs_run_around_a_stockout_and_idle_vms_are_scaled_away(home, stack_forks):
    lines = []
    result = demo.run(home=home, base_port=free_base_port(), second_wave=False, progress=lines.append,
                      timeout_s=240, forks=stack_forks)
    # With the first scaling decisions (which pass chose which pool, and the prices it named) when it fails.
    first = [f"{d['at']:%H:%M:%S.%f} {d['cluster']}/{d['region']} {d['action']}: {d['reason']}"
             for d in result.decisions if d["action"] in ("ADD", "BLOCK")][:12]
    assert result.problems == [], "\n".join(lines + first)
    outcomes = {job_id: (row["status"], row["attempt"]) for job_id, row in result.jobs.items()}
    # Two nodes; rank 1's VM preempted, the gang rerun whole (gangs.check: attempts given back unassembled,
    # their region too full for the second node, may come before or after the one preempted).
    assert outcomes.pop("pair-21")[0] == "SUCCEEDED"
    assert outcomes == {
        "train-1": ("SUCCEEDED", 1), "train-2": ("SUCCEEDED", 1), "train-3": ("SUCCEEDED", 1),
        "train-4": ("SUCCEEDED", 1), "eval-eu-5": ("SUCCEEDED", 1), "broken-6": ("FAILED", 1),
        "stopped-7": ("CANCELLED", 1), "spot-8": ("SUCCEEDED", 2), "secret-15": ("SUCCEEDED", 1),
        "hipaa-13": ("SUCCEEDED", 1), "near-data-14": ("SUCCEEDED", 1),
        **{f"sweep-17-{i}": ("SUCCEEDED", 1) for i in range(6)},  # the array, max_parallel 2
        "prep-18": ("SUCCEEDED", 1), "train-19": ("SUCCEEDED", 2), "eval-20": ("SUCCEEDED", 1),  # train retried
    }
    assert len(result.pipelines) == 3, result.pipelines
    assert len(result.gang) == 2 and "heard ranks [0, 1]" in result.gang[0], result.gang
    assert len(result.who) == 3, result.who  # two refusals with their senders; the secret in no table or log
    tagged = result.jobs.pop("hipaa-13")
    assert {row["region"] for row in result.jobs.values()}.isdisjoint({"us-central1"})  # stocked out
    # The tagged job: only us-central1 carries hipaa, so it waited for the stockout to end, and ran there.
    assert tagged["regions"] == ["us-central1"] and tagged["region"] == "us-central1"
    assert (datetime.fromisoformat(tagged["started_at"]) - datetime.fromisoformat(tagged["submitted_at"])
            ).total_seconds() > 30
    # The data job: its bucket's location, looked up in the storage stand-in, put europe-west4 first;
    # its input was staged onto the VM and its output is in the results bucket.
    near_data = result.jobs["near-data-14"]
    assert near_data["regions"][0] == near_data["region"] == "europe-west4"
    assert "zen: staged 1 file, 4.4 kB" in near_data["message"]
    assert "uploaded 1 file, 46 B in" in near_data["message"]
    assert any("runs/near-data-14/attempt-1/counts.txt: [('the', 200)" in line for line in result.placement)
    assert result.jobs["eval-eu-5"]["region"] == "europe-west4"
    assert result.jobs["broken-6"]["exit_code"] == 3
    # The preempted spot job saved its checkpoint as its VM went and resumed from it on attempt 2.
    assert "resumed from step" in result.jobs["spot-8"]["message"], result.jobs["spot-8"]["message"]
    actions = {(d["cluster"], d["region"], d["action"]) for d in result.decisions}
    # The stockout was seen and blocked; by which cluster first depends on timing (a cluster whose
    # hedges came up before the MIG reported the errors cancels its stuck asks without a block).
    assert any(region == "us-central1" and action == "BLOCK" for _, region, action in actions)
    assert result.vms_left == 0
    assert read_stack(home) is None  # the stack is down: its record is gone
    assert not (home / "pgdata" / "postmaster.pid").exists()  # and its Postgres stopped


def test_up_refuses_a_taken_port_and_a_running_stack(home):
    base = free_base_port(start=23000)  # away from the ports the other test's stack just released
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", Ports.from_base(base).compute))
        squatter.listen()
        with pytest.raises(StackError, match=f"{base + 1} \\(compute stand-in\\)"):
            LocalStack(home=home, ports=Ports.from_base(base)).up()
    stack = LocalStack(home=home, ports=Ports.from_base(base), config_path=demo.HERE / "zen-demo.yaml",
                       scenario=demo.HERE / "scenario.yaml")
    stack.up()
    try:
        with pytest.raises(StackError, match="already running"):
            LocalStack(home=home, ports=Ports.from_base(free_base_port(start=base + 20))).up()
    finally:
        stack.down()
    assert read_stack(home) is None
