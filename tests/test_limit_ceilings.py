"""A limit above what the platform can take is refused when the configuration loads, naming the field, the ceiling
and why (``zen.core.limits.CEILINGS``): such a limit loaded, was taken at submission, and failed later where its
user could not see why. ``limits.max_message_bytes`` above the 512 KB of an Eventarc event, which Zen's functions
receive every submission, stop and heartbeat as (``zen submit`` checked a larger request against it and published
it, and it never reached on_job_submitted); an attempt budget above a Postgres integer, which the database refused
for every job that named none."""

from __future__ import annotations

import pytest
import yaml

from tests.messages import heartbeat, job_request
from zen.core.config import DEFAULT_CONFIG_PATH, load_config
from zen.core.errors import ConfigError


def _configuration(tmp_path, **sections) -> str:
    """The shipped configuration with ``sections`` in place of its own, written to a file."""
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    raw.update(sections)
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize("sections, message", [
    ({"limits": {"max_message_bytes": 1024 * 1024}},
     "limits.max_message_bytes: 1048576 is above 512000, the largest Eventarc event Google gives a 2nd gen Cloud Run "
     "function (512 KB, not raisable)"),
    ({"limits": {"max_message_bytes": 10_000_001}},  # Pub/Sub's own 10 MB a message is further still
     "limits.max_message_bytes: 10000001 is above 512000, the largest Eventarc event"),
    ({"attempts": {"default_max_attempts": 2**31, "max_max_attempts": 2**31}},
     "attempts.default_max_attempts: 2147483648 is above 1000000, the most a job's max_attempts column (a Postgres "
     "integer) may start at and keep room for the one it grows by at every attempt that does not count"),
    ({"attempts": {"max_max_attempts": 2**32}},
     "attempts.max_max_attempts: 4294967296 is above 1000000, the most a job's max_attempts column"),
    ({"limits": {"max_runtime_s": 2**31}},
     "limits.max_runtime_s: 2147483648 is above 2147483647, the largest a job's max_runtime_s column holds "
     "(a Postgres integer)"),
], ids=["message-1MB", "message-past-pubsub", "default-attempts", "max-attempts", "runtime"])
def test_a_limit_above_its_ceiling_is_refused_at_load_with_the_reason(tmp_path, sections, message):
    with pytest.raises(ConfigError) as refused:
        load_config(_configuration(tmp_path, **sections))
    assert message in str(refused.value)


def test_limits_at_their_ceilings_load(tmp_path):
    config = load_config(_configuration(
        tmp_path, limits={"max_message_bytes": 512_000, "max_runtime_s": 2**31 - 1, "max_array_tasks": 10**6},
        attempts={"default_max_attempts": 10**6, "max_max_attempts": 10**6}))
    assert (config.limits.max_message_bytes, config.attempts.default_max_attempts) == (512_000, 10**6)


def test_an_attempt_budget_that_loads_is_one_a_job_can_be_stored_with(tmp_path, project, db, db_url, publisher,
                                                                      clock, monkeypatch):
    """Either refused at load, or a job that names no max_attempts is stored with it: an attempt budget beyond a
    Postgres integer loaded, and the database refused every such job (22003, out of range for type integer)."""
    from zen.app import Zen
    from zen.store import repository
    from zen_dev.local.invoke import FunctionsInvoker

    path = _configuration(tmp_path, attempts={"default_max_attempts": 2**31, "max_max_attempts": 2**31})
    try:
        config = load_config(path).model_copy(update={"project": project})
    except ConfigError as refused:
        assert "attempts.default_max_attempts: 2147483648 is above 1000000" in str(refused)
        return
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions = FunctionsInvoker(Zen(config, db, publisher, clock))
    try:
        functions.submit(job_request("budget"), message_id="m-1")
    finally:
        functions.zen.relay.marks.flush()
    with db.transaction() as session:
        stored = session.sql("SELECT job_id FROM jobs")
        refusals = [row["reason"] for row in repository.list_rejections(session)]
    assert stored == [{"job_id": "budget"}], refusals


def test_a_job_at_the_largest_attempt_budget_is_requeued_after_a_preemption(tmp_path, project, db, db_url, publisher,
                                                                           clock, monkeypatch):
    """A preemption (as a retry, a gang's reassembly) raises the budget by one, not spent: a job given the largest
    budget the configuration allows must still have room in its column for that (at a Postgres integer's largest,
    the write was refused and the preempted job never went back to the queue)."""
    from zen.app import Zen
    from zen.core.limits import CEILINGS
    from zen.store import repository
    from zen_dev.local.invoke import FunctionsInvoker

    most = CEILINGS["attempts.max_max_attempts"][0]
    config = load_config(_configuration(tmp_path, attempts={"default_max_attempts": 3, "max_max_attempts": most}))
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions = FunctionsInvoker(Zen(config.model_copy(update={"project": project}), db, publisher, clock))
    try:
        functions.submit(job_request("budget", max_attempts=most))
        for status, seq in (("CLAIMED", 1), ("RUNNING", 2), ("PREEMPTED", 3)):
            functions.heartbeat(heartbeat("budget", status, seq))
    finally:
        functions.zen.relay.marks.flush()
    with db.transaction() as session:
        record = repository.get_job(session, "budget")
    assert (record.status.value, record.attempt, record.max_attempts) == ("QUEUED", 2, most + 1)
