"""The fault checks, each a function of a running ``FaultStack`` returning one ``CheckResult``.

What every check asserts, from outside (HTTP answers) and from the database:
- no 5xx caused by content: with no infrastructure fault injected, every answer is 2xx;
- every message is accounted for: a submission either made its job or has a recorded rejection
  (nothing lost), a rejection is recorded at most once per message id;
- nothing runs twice: at most one start message per (job, attempt), at most one terminal status
  per job, and every job's history follows the transition table;
- every rejection was published (the outbox holds nothing unsent).
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings
from hypothesis import strategies as st

from tests.faults import strategies
from tests.faults.harness import TARGETS, Delivery, FaultStack
from tests.messages import agent_run, job_request
from zen.core.models import TERMINAL, JobStatus, illegal_step

_message_ids = itertools.count(1)


def next_message_id() -> str:
    return str(next(_message_ids))  # Pub/Sub's are decimal digits, unique per topic


@dataclass
class CheckResult:
    name: str
    cases: int = 0
    statuses: Counter = field(default_factory=Counter)
    content_5xx: int = 0
    infra_5xx: int = 0
    lost: int = 0
    duplicated: int = 0
    rejected: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def other_non_2xx(self) -> int:
        """Final answers that are neither 2xx nor 5xx (a 4xx is a nack to Pub/Sub as well)."""
        return sum(n for status, n in self.statuses.items() if not 200 <= status < 300 and status < 500)

    @property
    def ok(self) -> bool:
        return (self.content_5xx == 0 and self.other_non_2xx == 0 and self.lost == 0 and self.duplicated == 0
                and not self.problems)

    def line(self) -> str:
        other = self.other_non_2xx
        text = (f"{'PASS' if self.ok else 'FAIL'}  {self.name:<26} cases={self.cases:<6} "
                f"5xx(content)={self.content_5xx} 5xx(infra, redelivered)={self.infra_5xx} other-non-2xx={other} "
                f"lost={self.lost} duplicated={self.duplicated} rejected={self.rejected} {self.seconds:.0f}s")
        if self.problems:
            text += "\n      " + "\n      ".join(self.problems[:5])
        return text


def generate(strategy: st.SearchStrategy, n: int, seed: int) -> list[Any]:
    """``n`` examples of ``strategy``, reproducible from ``seed`` (hypothesis' generation phase)."""
    examples: list[Any] = []
    round_ = 0
    while len(examples) < n:
        @hypothesis_seed(seed * 1000 + round_)
        @settings(max_examples=min(n - len(examples), 2000), database=None, phases=[Phase.generate],
                  deadline=None, suppress_health_check=list(HealthCheck))
        @given(strategy)
        def collect(example: Any) -> None:
            examples.append(example)

        before = len(examples)
        collect()
        round_ += 1
        if len(examples) == before:
            break
    return examples[:n]


def submit_known_jobs(stack: FaultStack, n: int, prefix: str) -> list[str]:
    """Jobs that fuzzed heartbeats and stops can refer to."""
    ids = [f"{prefix}-known-{i}" for i in range(n)]
    deliveries = [Delivery("on_job_submitted", json.dumps(job_request(job_id)).encode(), next_message_id())
                  for job_id in ids]
    stack.deliver_all(deliveries)
    bad = [d for d in deliveries if d.final_status != 200]
    if bad:
        raise RuntimeError(f"could not submit the known jobs: {[d.responses for d in bad][:3]}")
    return ids


# -- invariants read from the database ---------------------------------------------------------
def _expected_job_id(delivery: Delivery) -> str:
    try:
        value = json.loads(delivery.payload).get("job_id")
    except Exception:  # noqa: BLE001 - not JSON, or not an object
        return delivery.message_id
    return value if isinstance(value, str) else delivery.message_id


def check_database(stack: FaultStack, result: CheckResult, deliveries: list[Delivery], *,
                   expect_published: bool = True) -> None:
    jobs = {r["job_id"] for r in stack.query("SELECT job_id FROM jobs")}
    rows = stack.query("SELECT source, message_id, reason FROM rejected_messages")
    rejected = Counter((r["source"], r["message_id"]) for r in rows)
    sources = {target: stack.topic(target) for target in TARGETS}
    mine = [(sources[d.target], d.message_id) for d in deliveries]
    result.rejected = sum(1 for key in mine if rejected[key])
    twice = [key for key in mine if rejected[key] > 1]
    if twice:
        result.problems.append(f"{len(twice)} messages rejected more than once, e.g. {twice[0]}")
    for delivery in deliveries:
        if delivery.target != "on_job_submitted" or delivery.final_status != 200:
            continue
        if delivery.envelope and {"data", "id"} & delivery.envelope.keys():
            continue  # a fuzzed envelope that replaced the message or its id is another message
        expected = _expected_job_id(delivery)  # an array's id names no job: its first task (zen.core.arrays)
        if not rejected[(sources[delivery.target], delivery.message_id)] and not {expected, f"{expected}-0"} & jobs:
            result.lost += 1
            if result.lost <= 3:
                result.problems.append(f"lost: message {delivery.message_id} ({delivery.note}) "
                                       f"{delivery.payload[:120]!r}")
    starts = stack.query(
        "SELECT attributes->>'job_id' AS job_id, attributes->>'attempt' AS attempt, count(*) AS n FROM outbox "
        "WHERE topic = :topic GROUP BY 1, 2 HAVING count(*) > 1", topic=stack.config.topics.job_start)
    result.duplicated += len(starts)
    history: dict[str, list[tuple[str | None, str]]] = {}
    for row in stack.query("SELECT job_id, from_status, to_status FROM job_events ORDER BY id"):
        if row["from_status"] != row["to_status"]:  # the same: a note (zen.jobs.announce.note), no transition
            history.setdefault(row["job_id"], []).append((row["from_status"], row["to_status"]))
    for job_id, steps in history.items():
        path = [JobStatus(to) for _, to in steps]
        bad = illegal_step(JobStatus.PENDING, path[1:]) if path and path[0] is JobStatus.PENDING else ("start",)
        if bad:
            result.problems.append(f"job {job_id}: history breaks the transition table: {steps}")
        if sum(1 for status in path if status in TERMINAL) > 1:
            result.duplicated += 1
            result.problems.append(f"job {job_id} ended twice: {steps}")
    if expect_published:
        # Publishing is acknowledged before a function answers; the rows are marked sent a moment
        # later, in the background (zen.jobs.messaging.SentMarks).
        deadline = time.monotonic() + 15
        while (unsent := stack.query("SELECT count(*) AS n FROM outbox WHERE sent_at IS NULL")[0]["n"]) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        if unsent:
            result.problems.append(f"{unsent} outbox messages were never published")


def _count(result: CheckResult, deliveries: list[Delivery], *, infra_fault: bool = False) -> None:
    result.cases = len(deliveries)
    for delivery in deliveries:
        result.statuses[delivery.final_status] += 1
        fives = sum(1 for status in delivery.responses if status >= 500)
        if infra_fault:
            result.infra_5xx += fives
            if delivery.final_status >= 500:  # never acked, even after the database came back
                result.content_5xx += 1
        else:
            result.content_5xx += fives
    refused = [d for d in deliveries if not 200 <= d.final_status < 300 and d.final_status < 500]
    if refused:  # a 4xx is a nack too: say which, as for a 5xx
        d = refused[0]
        result.problems.append(f"{d.final_status} for {d.target} message {d.message_id} ({d.note}): "
                               f"{d.payload[:160]!r} envelope={str(d.envelope)[:160]}")
    examples = [d for d in deliveries if any(s >= 500 for s in d.responses)]
    if examples and not infra_fault:
        d = examples[0]
        result.problems.append(f"5xx for {d.target} message {d.message_id} ({d.note}): {d.payload[:160]!r} "
                               f"envelope={str(d.envelope)[:160]}")


# -- the checks --------------------------------------------------------------------------------
def fuzz_topic(stack: FaultStack, target: str, n: int, seed: int, known: list[str]) -> CheckResult:
    """``n`` hostile messages of ``target``'s schema, delivered 4 at a time."""
    began = time.monotonic()
    rng = random.Random(seed)
    deliveries = []
    for payload, note in generate(strategies.payloads(target), n, seed):
        message_id = next_message_id()
        payload = (payload.replace(strategies.JOB.encode(), f"fz-{message_id}".encode())
                   .replace(strategies.KNOWN_JOB.encode(), rng.choice(known).encode()))
        deliveries.append(Delivery(target, payload, message_id, note=note))
    stack.deliver_all(deliveries)
    result = CheckResult(f"fuzz {target}")
    _count(result, deliveries)
    check_database(stack, result, deliveries)
    result.seconds = time.monotonic() - began
    return result


HEADER_CHARS = 4096


def fuzz_envelopes(stack: FaultStack, n: int, seed: int) -> CheckResult:
    """``n`` hostile CloudEvent envelopes around valid payloads, across the three topics."""
    began = time.monotonic()
    rng = random.Random(seed)
    deliveries = []
    for replaced, binary, note in generate(strategies.envelopes(), n, seed):
        message_id = next_message_id()
        if binary and isinstance(replaced, dict):  # its attributes are HTTP headers: one over the front's
            # 8 KB limit is answered 431 before any function runs (Eventarc sends none: its attributes
            # are its own and Pub/Sub's, 1 KB at most), so hostile values are cut to what a header holds
            replaced = {key: value[:HEADER_CHARS] if isinstance(value, str) else value
                        for key, value in replaced.items()}
        target = rng.choice(TARGETS)
        payload = {"on_job_submitted": job_request(f"env-{message_id}"),
                   "on_heartbeat": {"kind": "vm", "vm": "vm-e", "cluster": "1xl4", "region": "us-central1",
                                    "zone": "us-central1-a", "state": "IDLE", "seq": int(message_id),
                                    "sent_at": "2026-11-21T10:00:00Z"},
                   "on_stop_requested": {"job_id": f"env-{message_id}"}}[target]
        deliveries.append(Delivery(target, json.dumps(payload).encode(), message_id, envelope=replaced,
                                   binary=binary, note=note))
    stack.deliver_all(deliveries)
    result = CheckResult("fuzz CloudEvent envelopes")
    _count(result, deliveries)
    check_database(stack, result, deliveries)
    result.seconds = time.monotonic() - began
    return result


def _final_state(stack: FaultStack, job_id: str) -> tuple:
    [row] = stack.query("SELECT status, attempt, vm, exit_code, message FROM jobs WHERE job_id = :j", j=job_id)
    return tuple(row.values())


def duplicate_and_reordered(stack: FaultStack, n_jobs: int, seed: int) -> CheckResult:
    """Each job's submit and heartbeats delivered 1-3 times, all shuffled together, 4 at a time; each
    job must end as its twin does whose messages arrived once, in order."""
    began = time.monotonic()
    rng = random.Random(seed)
    finals = [("SUCCEEDED", 0), ("FAILED", 2), ("STOPPED", -15)]
    pairs = []
    for i in range(n_jobs):
        status, exit_code = rng.choice(finals)
        pairs.append((f"dr{seed}-clean-{i}", f"dr{seed}-messy-{i}", status, exit_code, rng.randint(0, 3)))

    def run_of(job_id, status, exit_code, beats):
        return agent_run(job_id, vm=f"vm-{job_id}", final=status, exit_code=exit_code, running_beats=beats)

    # Clean twins: submit once, then heartbeats in order (jobs in parallel, each job in sequence).
    def clean(pair):
        job_id, _, status, exit_code, beats = pair
        stack.post(Delivery("on_job_submitted", json.dumps(job_request(job_id)).encode(), next_message_id()))
        for beat in run_of(job_id, status, exit_code, beats):
            stack.post(Delivery("on_heartbeat", json.dumps(beat).encode(), next_message_id()))

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(clean, pairs))
    # Messy: every message 1-3 times (a redelivery keeps its message id), in any order; a heartbeat
    # may even arrive before its job's submission.
    messy: list[Delivery] = []
    for _, job_id, status, exit_code, beats in pairs:
        messages = [("on_job_submitted", job_request(job_id))] + [
            ("on_heartbeat", beat) for beat in run_of(job_id, status, exit_code, beats)]
        for target, payload in messages:
            message_id = next_message_id()
            for _ in range(rng.randint(1, 3)):
                messy.append(Delivery(target, json.dumps(payload).encode(), message_id, note="duplicate"))
    submits = [d for d in messy if d.target == "on_job_submitted"]
    rest = [d for d in messy if d.target != "on_job_submitted"]
    rng.shuffle(submits)
    rng.shuffle(rest)
    # Heartbeats of a job not yet submitted are rejected for good (unknown job): like Pub/Sub's
    # redelivery of a nack, the agent keeps reporting; here, deliver submits first, then the rest
    # reordered and duplicated, then each job's final report once more (an agent's retry).
    stack.deliver_all(submits)
    stack.deliver_all(rest)
    result = CheckResult("duplicate+reordered delivery")
    _count(result, submits + rest)
    for clean_id, messy_id, *_ in pairs:
        if _final_state(stack, messy_id)[0] != _final_state(stack, clean_id)[0]:
            result.problems.append(f"{messy_id} ended {_final_state(stack, messy_id)}, its clean twin "
                                   f"{_final_state(stack, clean_id)}")
    check_database(stack, result, submits + rest)
    result.seconds = time.monotonic() - began
    return result


def database_restart(stack: FaultStack, n: int, seed: int) -> CheckResult:
    """``n`` submissions (a fifth of them hostile) delivered 4 at a time while Postgres restarts;
    a 5xx is redelivered as Pub/Sub would. Every valid job must exist exactly once, none rejected."""
    began = time.monotonic()
    rng = random.Random(seed)
    hostile = generate(strategies.payloads("on_job_submitted"), max(1, n // 5), seed)
    deliveries = []
    valid_ids = []
    for i in range(n):
        message_id = next_message_id()
        if i % 5 == 4:
            payload, note = hostile[(i // 5) % len(hostile)]
            payload = payload.replace(strategies.JOB.encode(), f"rs-{message_id}".encode())
        else:
            job_id = f"rs{seed}-{i}"
            valid_ids.append(job_id)
            payload, note = json.dumps(job_request(job_id, priority=rng.randint(0, 5))).encode(), "valid"
        deliveries.append(Delivery("on_job_submitted", payload, message_id, note=note))
    restarted = threading.Event()
    restart_took: list[float] = []

    def restart_when_a_third_is_in():
        while sum(1 for d in deliveries if d.responses) < n // 3:
            time.sleep(0.01)
        restart_took.append(stack.restart_database())
        restarted.set()

    restarter = threading.Thread(target=restart_when_a_third_is_in, daemon=True)
    restarter.start()
    stack.deliver_all(deliveries, redeliver_5xx=True, redeliver_for_s=120)
    restarter.join(timeout=120)
    result = CheckResult("database restart mid-burst")
    _count(result, deliveries, infra_fault=True)
    if not restarted.is_set():
        result.problems.append("the database was not restarted during the burst")
    jobs = {r["job_id"] for r in stack.query("SELECT job_id FROM jobs WHERE job_id LIKE :p", p=f"rs{seed}-%")}
    missing = [job_id for job_id in valid_ids if job_id not in jobs]
    result.lost += len(missing)
    if missing:
        result.problems.append(f"valid jobs missing after the restart: {missing[:5]}")
    wrongly = stack.query("SELECT message_id, reason FROM rejected_messages WHERE job_id LIKE :p",
                          p=f"rs{seed}-%")
    if wrongly:
        result.problems.append(f"valid jobs rejected during the restart: {wrongly[:3]}")
    # Publishing may have failed while the database was away: the tick resends (not served here).
    check_database(stack, result, deliveries, expect_published=False)
    if restart_took:
        result.name += f" ({restart_took[0]:.1f}s down)"
    result.seconds = time.monotonic() - began
    return result


BUDGETS = {
    # name: (submits, heartbeats, stops, envelopes, duplicate+reordered jobs, restart burst)
    "small": (60, 60, 30, 40, 6, 60),
    "full": (4000, 4000, 2000, 1500, 100, 600),
}


def run_all(stack: FaultStack, budget: str = "small", seed: int = 1) -> list[CheckResult]:
    submits, heartbeats, stops, envelopes, jobs, burst = BUDGETS[budget]
    known = submit_known_jobs(stack, 20, f"k{seed}")
    return [
        fuzz_topic(stack, "on_job_submitted", submits, seed, known),
        fuzz_topic(stack, "on_heartbeat", heartbeats, seed + 1, known),
        fuzz_topic(stack, "on_stop_requested", stops, seed + 2, known),
        fuzz_envelopes(stack, envelopes, seed + 3),
        duplicate_and_reordered(stack, jobs, seed + 4),
        database_restart(stack, burst, seed + 5),
    ]
