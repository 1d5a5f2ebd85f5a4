"""The demo's two-node job (``examples/two-nodes.yaml``): two VMs of one region start together and meet at
``MASTER_PORT``; once both have met, rank 1's spot VM is preempted, and the whole gang goes back to the
queue as attempt 2 (every node of attempt 1 stopped), which meets again and succeeds
(docs/how-to/multi-node.md)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable

import yaml

from zen.store import repository
from zen_dev.demo.pipelines import REGIONS

GANG_ID = "pair-21"
USER = "trainer"  # the queue multinode's only user: its 2 L4s neither wait for nor hold the demo queue's
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "two-nodes.yaml"
MET = "rendezvous at"


def request() -> dict:
    body = yaml.safe_load(EXAMPLE.read_text())
    body.update(job_id=GANG_ID, user_id=USER, regions=REGIONS, command=[sys.executable, *body["command"][1:]],
                env={"WORK_S": "120"})  # attempt 1 works until its node is preempted; attempt 2 resumes at once
    return body


def _lines(job_id: str) -> list[dict]:
    logs = Path(os.environ["ZEN_JOB_LOGS_DIR"]) / job_id
    return [json.loads(line) for path in sorted(logs.glob("attempt-*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


class Gang:
    """Publishes the two-node job, and preempts rank 1's VM once both nodes of attempt 1 have met."""

    def __init__(self, publish: Callable[[dict], None], preempt: Callable[[str, str], None]):
        self._publish, self._preempt = publish, preempt
        self.preempted: str | None = None  # the VM

    def start(self) -> None:
        self._publish(request())

    def advance(self, db, say: Callable[[str], None]) -> None:
        if self.preempted or sum(1 for e in _lines(GANG_ID) if e["attempt"] == 1 and MET in e["text"]) < 2:
            return
        with db.transaction() as session:
            job = repository.get_job(session, GANG_ID)
        if job is None or job.attempt != 1 or len(job.gang) != 2:
            return
        victim = job.gang[1]
        self._preempt(victim.zone, victim.vm)
        self.preempted = victim.vm
        say(f"{GANG_ID}: both nodes met in {victim.region}; rank 1's spot VM {victim.vm} preempted")


def check(db) -> tuple[list[str], list[str]]:
    """(lines for the summary, problems): attempt 1's two nodes met, a node's preemption sent the whole gang
    back as attempt 2 (one LOST naming the VM), and attempt 2's two nodes met again and succeeded."""
    with db.transaction() as session:
        job = repository.get_job(session, GANG_ID)
        history = repository.job_history(session, GANG_ID)
    if job is None:
        return [], [f"{GANG_ID} never reached Zen"]
    entries = _lines(GANG_ID)
    met = {attempt: [e["text"] for e in entries if e["attempt"] == attempt and MET in e["text"]] for attempt in (1, 2)}
    lost = [row["reason"] for row in history if row["to_status"] == "LOST"]
    assembled = [row["reason"] for row in history if row["to_status"] == "ASSIGNED"]
    problems = []
    if len(met[1]) != 2 or len(met[2]) != 2 or not all(t.endswith("heard ranks [0, 1]") for t in met[1] + met[2]):
        problems.append(f"{GANG_ID}: its nodes did not meet twice, two at a time ({met})")
    if len(lost) != 1 or len(assembled) != 2:
        problems.append(f"{GANG_ID}: expected one LOST attempt and two assembled ({lost}, {assembled})")
    if problems:
        return [], problems
    return [f"  {GANG_ID}: {assembled[0]}; each node printed \"{met[1][0].split(': ', 1)[1]}\"",
            f"  {GANG_ID}: {lost[0]}: the whole gang went back as attempt 2; {assembled[1]}; "
            f"{job.status.value}"], []
