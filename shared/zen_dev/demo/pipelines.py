"""The demo's sweep and pipeline: a 6-task array with ``max_parallel: 2`` (each task its learning rate), and
three steps (prep, then train, then eval) whose train fails its first attempt and is retried
(zen.core.arrays, zen.core.dependencies, zen.core.retries; docs/how-to/arrays-and-pipelines.md)."""

from __future__ import annotations

import sys
from typing import Callable

ARRAY_ID, PREP_ID, TRAIN_ID, EVAL_ID = "sweep-17", "prep-18", "train-19", "eval-20"
RATES = ("0.3", "0.1", "0.03", "0.01", "0.003", "0.001")
MAX_PARALLEL = 2
TASK_IDS = [f"{ARRAY_ID}-{i}" for i in range(len(RATES))]
REGIONS = ["us-east4", "europe-west4"]  # never the stocked-out region, whenever the stockout ends
PIPELINE_IDS = [PREP_ID, TRAIN_ID, EVAL_ID]


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def array_request() -> dict:
    return {"job_id": ARRAY_ID, "user_id": "demo", "cluster": "1xl4", "regions": REGIONS,
            "command": _py("import os, time; time.sleep(2); "
                           "print('trial', os.environ['ZEN_ARRAY_INDEX'], 'lr', os.environ['LR'])"),
            "array": {"params": [{"LR": lr} for lr in RATES], "max_parallel": MAX_PARALLEL}}


def step_requests() -> list[dict]:
    """The pipeline's steps, in order; each names the one before (published once that one is stored)."""
    train = ("import os, sys; attempt = os.environ['ZEN_JOB_ATTEMPT']; print('train attempt', attempt); "
             "sys.exit(3 if attempt == '1' else 0)")
    steps = [
        {"job_id": PREP_ID, "user_id": "demo", "cluster": "1xl4", "command": _py("print('prep: 3 shards written')")},
        {"job_id": TRAIN_ID, "user_id": "demo", "cluster": "1xl4", "command": _py(train), "after": [PREP_ID],
         "max_retries": 1, "retry_exit_codes": [3], "retry_backoff_s": 0},
        {"job_id": EVAL_ID, "user_id": "demo", "cluster": "1xl4", "command": _py("print('eval: accuracy 0.91')"),
         "after": [TRAIN_ID]},
    ]
    return [{**step, "regions": REGIONS} for step in steps]


class Pipeline:
    """Publishes the array at once and each step once the step before it is stored (Pub/Sub does not
    order messages; ``zen submit --after`` waits the same way)."""

    def __init__(self, publish: Callable[[dict], None]):
        self._publish = publish
        self._steps = step_requests()
        self._sent = 0

    def start(self) -> None:
        self._publish(array_request())
        self._next()

    def advance(self, rows: dict[str, dict]) -> None:
        if 0 < self._sent < len(self._steps) and self._steps[self._sent - 1]["job_id"] in rows:
            self._next()

    def _next(self) -> None:
        self._publish(self._steps[self._sent])
        self._sent += 1


def check(histories: list[dict]) -> tuple[list[str], list[str]]:
    """(lines for the summary, problems): at most MAX_PARALLEL tasks let go at once (and that many at
    some moment), train retried after its first attempt's exit 3, eval queued only after train succeeded."""
    lines, problems = [], []
    holding: set[str] = set()
    most = 0
    for event in histories:
        if event["job_id"] not in TASK_IDS:
            continue
        if event["to_status"] == "QUEUED":
            holding.add(event["job_id"])
        elif event["to_status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            holding.discard(event["job_id"])
        most = max(most, len(holding))
    if most != MAX_PARALLEL:
        problems.append(f"array {ARRAY_ID}: at most {most} tasks were let go at once (max_parallel {MAX_PARALLEL})")
    lines.append(f"  array {ARRAY_ID}: {len(TASK_IDS)} trials from one message, at most {most} at once "
                 f"(max_parallel {MAX_PARALLEL}); zen jobs list --array {ARRAY_ID}")
    retried = [e["reason"] for e in histories if e["job_id"] == TRAIN_ID and "retry" in e["reason"]]
    if not retried:
        problems.append(f"{TRAIN_ID} was not retried after its first attempt failed")
    else:
        lines.append(f"  {TRAIN_ID}: {retried[0]}")
    train_done = next((e["at"] for e in histories if e["job_id"] == TRAIN_ID and e["to_status"] == "SUCCEEDED"), None)
    eval_queued = next((e["at"] for e in histories if e["job_id"] == EVAL_ID and e["to_status"] == "QUEUED"), None)
    if train_done is None or eval_queued is None or eval_queued < train_done:
        problems.append(f"{EVAL_ID} did not wait for {TRAIN_ID} to succeed")
    else:
        lines.append(f"  {EVAL_ID}: waited PENDING for {TRAIN_ID} ({PREP_ID} -> {TRAIN_ID} -> {EVAL_ID}), "
                     f"queued {(eval_queued - train_done).total_seconds():.1f} s after it succeeded")
    return lines, problems
