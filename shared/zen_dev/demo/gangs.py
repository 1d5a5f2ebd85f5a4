"""The demo's two-node job (``examples/two-nodes.yaml``): two VMs of one region start together and meet at
``MASTER_PORT``; once both have met, rank 1's spot VM is preempted, and the whole gang goes back to the
queue as the next attempt (every node of the one preempted stopped), which meets again and succeeds
(docs/how-to/multi-node.md). The attempt preempted is usually the first; it is a later one where the gang
was given back before it was whole (its region too full for its second node, ``zen.core.gang``), which
depends on what else the demo's cluster runs at that moment."""

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
        if self.preempted:
            return
        with db.transaction() as session:
            job = repository.get_job(session, GANG_ID)
        if job is None or not job.gang or len(job.gang) != 2 or sum(
                1 for e in _lines(GANG_ID) if e["attempt"] == job.attempt and MET in e["text"]) < 2:
            return
        victim = job.gang[1]
        self._preempt(victim.zone, victim.vm)
        self.preempted = victim.vm
        say(f"{GANG_ID}: both nodes met in {victim.region}; rank 1's spot VM {victim.vm} preempted")


def check(db) -> tuple[list[str], list[str]]:
    """(lines for the summary, problems): an attempt's two nodes met, a node's preemption sent the whole gang
    back to the queue (one LOST naming the VM), and the job's last attempt met again and succeeded; the
    attempts between, and those before the preempted one, given back unassembled (none met)."""
    with db.transaction() as session:
        job = repository.get_job(session, GANG_ID)
        history = repository.job_history(session, GANG_ID)
    if job is None:
        return [], [f"{GANG_ID} never reached Zen"]
    entries = _lines(GANG_ID)
    lost = [(row["attempt"], row["reason"]) for row in history if row["to_status"] == "LOST"]
    assembled = [row["reason"] for row in history if row["to_status"] == "ASSIGNED"]
    first = lost[0][0] if lost else job.attempt - 1
    met = {attempt: [e["text"] for e in entries if e["attempt"] == attempt and MET in e["text"]]
           for attempt in range(1, job.attempt + 1)}
    problems = []
    if [a for a, texts in met.items() if texts] != [first, job.attempt] or not all(
            len(texts) == 2 and all(t.endswith("heard ranks [0, 1]") for t in texts) for texts in met.values() if texts):
        problems.append(f"{GANG_ID}: its nodes did not meet twice, two at a time, in the attempt preempted and its last ({met})")
    if len(lost) != 1 or len(assembled) != 2 or job.status.value != "SUCCEEDED":
        problems.append(f"{GANG_ID}: expected one LOST attempt and two assembled, then SUCCEEDED "
                        f"({lost}, {assembled}, {job.status.value} attempt {job.attempt})")
    if problems:
        return [], problems
    return [f"  {GANG_ID}: {assembled[0]}; each node printed \"{met[first][0].split(': ', 1)[1]}\"",
            f"  {GANG_ID}: {lost[0][1]}: the whole gang went back as attempt {first + 1}; {assembled[1]}"
            f"{'' if job.attempt == first + 1 else f' (attempt {job.attempt})'}; {job.status.value}"], []
