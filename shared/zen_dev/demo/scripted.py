"""``make demo`` (for now): a scripted job lifecycle through the real functions and a real Postgres.

It starts the embedded Postgres under ``.zen/``, recreates a ``zen_demo`` database, migrates it, and
plays what users and agents would publish, through functions-framework with Eventarc envelopes:
a job that runs to SUCCEEDED, one stopped by its user, one whose VM goes silent (LOST, rerun as
attempt 2), and one rejected message. Outgoing Pub/Sub messages are recorded in memory (the full
local stack with the Pub/Sub stand-in replaces this in a later issue). Time is a manual clock, so
the heartbeat deadline passes instantly.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import datetime, timezone

from zen.app import Zen
from zen.cli.kit import JOB_COLUMNS, job_row, print_table
from zen.core.clock import ManualClock
from zen.core.config import load_config
from zen.store import repository
from zen.store.db import Database, parse_database_url
from zen.store.migrate import migrate
from zen_dev.embedded import embedded_database_url
from zen_dev.fakes.publisher import RecordingPublisher
from zen_dev.local.environment import overridden_environ
from zen_dev.local.invoke import FunctionsInvoker

DEMO_DB = "zen_demo"


def _fresh_database() -> Database:
    db = Database.from_target(parse_database_url(embedded_database_url(fresh=True, database=DEMO_DB)))
    migrate(db)
    return db


def _beat(job_id: str, status: str, seq: int, vm: str, attempt: int = 1, **extra) -> dict:
    return {"job_id": job_id, "attempt": attempt, "vm": vm, "region": "us-central1", "zone": "us-central1-a",
            "status": status, "seq": seq, "sent_at": datetime.now(timezone.utc).isoformat(), **extra}


def main() -> int:
    logging.getLogger("zen").setLevel(logging.ERROR)  # the demo prints its own summary
    clock = ManualClock(datetime.now(timezone.utc))
    publisher = RecordingPublisher()
    db = _fresh_database()
    # The demo's VMs are names in a script, holding no identity token: its Zen checks no proof, by choice
    # (a deployed one requires them: zen.adapters.vm_proof).
    with overridden_environ({"ZEN_VM_PROOF": "off"}):
        zen = Zen(load_config(), db, publisher, clock)
    fn = FunctionsInvoker(zen)

    def step(text: str) -> None:
        print(f"  - {text}")

    print("Zen demo: the job lifecycle through the four functions and Postgres\n")
    step("submit train-1 (4xa100-40gb); vm-a claims, runs, succeeds")
    fn.submit({"job_id": "train-1", "user_id": "alice", "cluster": "4xa100-40gb",
               "command": ["python", "train.py", "--epochs", "3"]})
    for seq, status in enumerate(["CLAIMED", "RUNNING", "RUNNING"], start=1):
        fn.heartbeat(_beat("train-1", status, seq, "vm-a"))
    fn.heartbeat(_beat("train-1", "SUCCEEDED", 4, "vm-a", exit_code=0, message="epoch 3/3 loss=0.12"))

    step("submit sweep-2 by GPU shape (8 x A100 -> 8xa100-40gb); vm-b runs it; the user stops it")
    fn.submit({"job_id": "sweep-2", "user_id": "bob", "gpu_type": "nvidia-tesla-a100", "gpu_count": 8,
               "command": ["python", "sweep.py"]})
    fn.heartbeat(_beat("sweep-2", "CLAIMED", 1, "vm-b"))
    fn.heartbeat(_beat("sweep-2", "RUNNING", 2, "vm-b"))
    fn.stop({"job_id": "sweep-2", "reason": "wrong learning rate"})
    fn.heartbeat(_beat("sweep-2", "RUNNING", 3, "vm-b"))  # late heartbeat: must not undo the stop
    fn.heartbeat(_beat("sweep-2", "STOPPED", 4, "vm-b", exit_code=-15))

    step("submit eval-3; vm-c claims it and goes silent; 3 minutes later the tick requeues it; vm-d runs attempt 2")
    fn.submit({"job_id": "eval-3", "user_id": "carol", "cluster": "1xl4", "image": "eval:latest"})
    fn.heartbeat(_beat("eval-3", "CLAIMED", 1, "vm-c"))
    fn.heartbeat(_beat("eval-3", "RUNNING", 2, "vm-c"))
    clock.advance(180)
    fn.tick()
    fn.heartbeat(_beat("eval-3", "CLAIMED", 1, "vm-d", attempt=2))
    fn.heartbeat(_beat("eval-3", "SUCCEEDED", 2, "vm-d", attempt=2, exit_code=0))

    step("publish a malformed request (unknown cluster): rejected with a reason, acked")
    fn.submit({"job_id": "bad-4", "user_id": "dave", "cluster": "9xh100", "command": ["x"]})
    step("redeliver train-1's submit and final heartbeat: nothing changes")
    fn.submit({"job_id": "train-1", "user_id": "alice", "cluster": "4xa100-40gb",
               "command": ["python", "train.py", "--epochs", "3"]})
    fn.heartbeat(_beat("train-1", "SUCCEEDED", 4, "vm-a", exit_code=0, message="epoch 3/3 loss=0.12"))

    with db.transaction() as session:
        jobs = repository.list_jobs(session)
        histories = {j.job_id: repository.job_history(session, j.job_id) for j in jobs}
        rejected = repository.list_rejections(session)
    print("\nJobs:")
    print_table([job_row(j) for j in jobs], JOB_COLUMNS)
    print("\nHistory of eval-3:")
    for row in histories["eval-3"]:
        print(f"  attempt {row['attempt']}: {row['from_status'] or '-':>9} -> {row['to_status']:<9} {row['reason']}")
    print("\nRejected messages:")
    for row in rejected:
        named = f"(names {row['named_job_id']})" if row.get("named_job_id") else "-"
        print(f"  [{row['source']}] {row['job_id'] or named}: {row['reason']}")
    counts = Counter(m.topic for m in publisher.sent)
    print("\nPublished (through the outbox): " + ", ".join(f"{t}={n}" for t, n in sorted(counts.items())))
    actions = [json.loads(m.data)["action"] + "->" + m.attributes["vm"] for m in publisher.on("zen-vm-control")
               if m.attributes.get("kind") != "start"]  # orders, not starts offered to warm VMs
    print("VM control messages: " + ", ".join(actions))

    expected = {"train-1": "SUCCEEDED", "sweep-2": "CANCELLED", "eval-3": "SUCCEEDED"}
    actual = {j.job_id: j.status.value for j in jobs}
    db.close()
    if actual != expected or len(rejected) != 1:
        print(f"\nUNEXPECTED OUTCOME: {actual} (expected {expected}), {len(rejected)} rejected")
        return 1
    print("\nAll jobs ended as expected.")
    return 0
