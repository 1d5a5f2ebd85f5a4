"""A fault through the whole local stack (real agents, the Compute stand-in, the functions, the ticker):
deletes refused while VMs are drained for a scale-down (issue 34). Three VMs run a first wave of jobs,
go idle and are drained; every ``deleteInstances`` is answered 503, so they stay in their MIG with
their agents running. A second wave of eight jobs then must start on new VMs, with no claim storm:
at most 3 refused claims per start (the issue's bound), few in all.

On code whose drained VM did not learn it was draining, each drained agent pulled again at once after
every refusal and Zen published the start again each time: hundreds of refused claims per start."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.stack_support import free_base_port, home  # noqa: F401 - the fixture
from tests.faults.stack import until
from zen_dev.local.environment import overridden_environ
from zen_dev.local.stack import LocalStack, Ports

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parent / "fixtures"
JOB = "import time; time.sleep(1)"



def _rows(db, sql: str, **params) -> list[dict]:
    with db.transaction() as session:
        return session.sql(sql, **params)


def refused_per_start(db) -> dict[tuple[str, int], int]:
    """Claims refused because their VM was being scaled down, per (job, attempt): each row's count
    (one row per VM, job, attempt and cause), or one per row where a schema has no count."""
    counted = _rows(db, "SELECT 1 FROM information_schema.columns WHERE table_name = 'rejected_messages' "
                        "AND column_name = 'count'")
    rows = _rows(db, f"SELECT job_id, payload, {'count' if counted else '1'} AS n FROM rejected_messages "
                     "WHERE reason LIKE '%is being scaled down'")
    per: dict[tuple[str, int], int] = {}
    for row in rows:
        key = (row["job_id"], json.loads(row["payload"])["attempt"])
        per[key] = per.get(key, 0) + row["n"]
    return per


def test_vms_drained_while_deletes_fail_make_no_claim_storm(home, tmp_path, stack_forks):  # noqa: F811
    from google.cloud import pubsub_v1

    from zen.store.db import Database

    stack = LocalStack(home=home, config_path=FIXTURES / "drain-storm.yaml",
                       scenario=FIXTURES / "drain-storm-scenario.yaml", tick_every_s=3.0,
                       ports=Ports.from_base(free_base_port(start=26000)), fresh=True,
                       agent_env={"ZEN_AGENT_VM_HEARTBEAT_S": "2"}, forks=stack_forks)
    record = stack.up()
    try:
        with overridden_environ(record["env"]):
            db = Database.from_env()
            publisher = pubsub_v1.PublisherClient()
            topic = publisher.topic_path(stack.config.project, stack.config.topics.job_submitted)

            def submit(job_id: str) -> None:
                body = {"job_id": job_id, "user_id": "alice", "cluster": "1xl4",
                        "command": [sys.executable, "-c", JOB]}
                publisher.publish(topic, json.dumps(body).encode(), **stack.sender("alice")).result(30)

            def ended(prefix: str, n: int):
                rows = _rows(db, "SELECT job_id, status, vm, attempt, submitted_at, started_at FROM jobs "
                                 "WHERE job_id LIKE :p AND status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')",
                             p=prefix + "%")
                return rows if len(rows) == n else None

            for i in range(3):
                submit(f"first-{i}")
            assert until(lambda: ended("first-", 3), 120), "the first wave never ended"
            first_vms = {row["vm"] for row in ended("first-", 3)}
            drained = until(lambda: {r["name"] for r in _rows(db, "SELECT name FROM vm_drains")} >= first_vms
                             and first_vms, 60)
            assert drained, f"the first wave's VMs {first_vms} were not drained"

            began = time.monotonic()
            for i in range(8):
                submit(f"second-{i}")
            second = until(lambda: ended("second-", 8), 180)
            assert second, f"the second wave never ended: {_rows(db, 'SELECT job_id, status, vm FROM jobs')}"
            took = time.monotonic() - began
            per_start = refused_per_start(db)
            over = _rows(db, "SELECT count(*) AS n FROM rejected_messages WHERE reason LIKE '%the job is over)'")
            still = {r["name"] for r in _rows(db, "SELECT name FROM vm_drains")}
    finally:
        stack.down()

    print(f"\nsecond wave ended in {took:.0f} s; refused claims per start {sorted(per_start.values())}; "
          f"rows of claims after the end {over[0]['n']}; drained VMs still there {len(still & drained)}")
    assert {row["status"] for row in second} == {"SUCCEEDED"}
    assert not {row["vm"] for row in second} & drained  # each started on another VM
    assert max(per_start.values(), default=0) <= 3, per_start
    assert sum(per_start.values()) <= 3 * len(drained), per_start  # about one claim per drained VM
    waits = sorted((row["started_at"] - row["submitted_at"]).total_seconds() for row in second)
    print(f"second wave's waits to start (s): {[round(w) for w in waits]}")
