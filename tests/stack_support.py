"""Local stacks in tests: a free block of ports, the ``home`` fixture (a short-named directory for one
stack, its Postgres stopped and the directory removed afterwards; import ``home`` into a test module to
use it), a stack running for the length of a ``with`` (``running_stack``), a submission as its user
(``submit_as``) and the wait for jobs to end (``ended``)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from zen_dev.local.environment import overridden_environ
from zen_dev.local.stack import LocalStack, Ports, ephemeral_ports, port_free


def free_base_port(start: int = 21000) -> int:
    """The first block of a stack's ports from ``start`` that is free (tests running at once pick apart),
    below the kernel's ephemeral ports (a stack refuses those: zen_dev.local.stack.ephemeral_ports)."""
    below = ephemeral_ports().start or 65536  # empty: no range to keep below
    for base in range(start, min(max(30000, start + 2000), below - 12), 20):
        if all(port_free(p) for p in Ports.from_base(base).all().values()):
            return base
    raise RuntimeError(f"no free block of ports from {start} below {below}")


@pytest.fixture
def home():
    """A fresh directory for one stack; its Postgres stopped and the directory removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ze2e", dir="/tmp"))  # short: unix socket paths are limited
    yield path
    from zen_dev.embedded import stop_embedded_server

    stop_embedded_server(path)  # already stopped with the stack, unless a test failed before that
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def running_stack(home: Path, config: str, scenario: str, start: int, tick_every_s: float = 2.0,
                  **options: Any) -> Iterator[LocalStack]:
    """A local stack of the configuration and scenario texts, its ports from ``start``, with its environment
    applied (the official clients find its stand-ins), brought down afterwards. ``options``: LocalStack's
    others (``agent_env``, ``buckets``)."""
    (home / "zen.yaml").write_text(config)
    (home / "scenario.yaml").write_text(scenario)
    stack = LocalStack(home=home / "stack", config_path=home / "zen.yaml", scenario=home / "scenario.yaml",
                       tick_every_s=tick_every_s, ports=Ports.from_base(free_base_port(start=start)), fresh=True,
                       **options)
    record = stack.up()
    try:
        with overridden_environ(record["env"]):
            yield stack
    finally:
        stack.down()


def submit_as(stack: LocalStack, user: str, body: dict[str, Any]) -> None:
    """Publish a JobRequest as ``zen submit`` does, with ``user``'s ID token (the stack's identity)."""
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path(stack.config.project, stack.config.topics.job_submitted)
    publisher.publish(topic, json.dumps(body).encode(), **stack.sender(user)).result(30)


def ended(job_ids: list[str], timeout_s: float) -> list[Any]:
    """The jobs (None for one not stored) once all have ended, or as they are when ``timeout_s`` is up."""
    from zen.store import repository
    from zen.store.db import Database

    db = Database.from_env()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            with db.transaction() as session:
                jobs = [repository.get_job(session, j) for j in job_ids]
            if all(job is not None and job.status.terminal for job in jobs) or time.monotonic() > deadline:
                return jobs
            time.sleep(1)
    finally:
        db.close()


def log_tails(home: Path, lines: int = 25) -> str:
    """The last ``lines`` of each log file under a stack's ``home`` (its processes' and its VMs' agents'),
    for the report of a test that failed: CI keeps nothing else of the stack."""
    parts = []
    for path in sorted(home.rglob("*.log")):
        text = path.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {path.relative_to(home)} (last {len(text)} lines)\n" + "\n".join(text))
    return "\n".join(parts) or f"no log files under {home}"


def _read(read: Callable[[Any], Any]) -> Any:
    """What ``read`` returns from one transaction on the stack's database (``ZEN_DATABASE_URL``)."""
    from zen.store.db import Database

    db = Database.from_env()
    try:
        with db.transaction() as session:
            return read(session)
    finally:
        db.close()


def refusal(job_id: str) -> dict[str, Any] | None:
    """The newest refusal of a submission of ``job_id`` (None: none), for a failing assertion's message when
    the job was never stored."""
    from zen.store import repository

    return _read(lambda session: repository.latest_rejection(session, job_id))


def decisions() -> list[str]:
    """The scaling decisions so far, one line each (for a failing assertion's message)."""
    rows = _read(lambda session: session.sql(
        "SELECT at, region, action, vm, reason FROM scaling_decisions ORDER BY id"))
    return [f"{r['at']:%H:%M:%S} {r['region']} {r['action']} {r['vm'] or ''}: {r['reason']}" for r in rows]


def history(job_id: str) -> list[str]:
    """The job's history, one line a change (for a failing assertion's message: why an attempt ended)."""
    from zen.store import repository

    rows = _read(lambda session: repository.job_history(session, job_id))
    return [f"{r['attempt']} {r['from_status']} -> {r['to_status']}: {r['reason']}" for r in rows]


def job_view(job_id: str) -> dict[str, Any]:
    """The job's public view as ``zen jobs get --json`` shows it ({} for a job not stored)."""
    from zen.store import repository

    job = _read(lambda session: repository.get_job(session, job_id))
    return job.public_view() if job else {}
