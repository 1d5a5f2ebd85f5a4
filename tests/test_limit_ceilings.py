"""A limit above what the platform can take is refused when the configuration loads, naming the field, the ceiling
and why (``zen.core.limits.CEILINGS``): such a limit loaded, was taken at submission, and failed later where its
user could not see why. ``limits.max_message_bytes`` above the largest payload whose Eventarc event (base64, with its
attributes) fits 512 KB, as which Zen's functions receive every submission, stop and heartbeat (``zen submit``
checked a larger request against it and published it, and it never reached on_job_submitted); an attempt budget
above a Postgres integer, which the database refused for every job that named none."""

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
     "limits.max_message_bytes: 1048576 is above 366000, the largest payload whose Eventarc event (the payload "
     "base64-encoded, with its attributes) fits the 512 KB Google gives a 2nd gen Cloud Run function (not raisable)"),
    ({"limits": {"max_message_bytes": 10_000_001}},  # Pub/Sub's own 10 MB a message is further still
     "limits.max_message_bytes: 10000001 is above 366000, the largest payload whose Eventarc event"),
    ({"limits": {"max_message_bytes": 512_000}},  # its event, the payload in base64 (683 KB), is no 512 KB one
     "limits.max_message_bytes: 512000 is above 366000, the largest payload whose Eventarc event"),
    ({"attempts": {"default_max_attempts": 2**31, "max_max_attempts": 2**31}},
     "attempts.default_max_attempts: 2147483648 is above 1000000, the most a job's max_attempts column (a Postgres "
     "integer) may start at and keep room for the one it grows by at every attempt that does not count"),
    ({"attempts": {"max_max_attempts": 2**32}},
     "attempts.max_max_attempts: 4294967296 is above 1000000, the most a job's max_attempts column"),
    ({"limits": {"max_runtime_s": 2**31}},
     "limits.max_runtime_s: 2147483648 is above 2147483647, the largest a job's max_runtime_s column holds "
     "(a Postgres integer)"),
], ids=["message-1MB", "message-past-pubsub", "message-512KB", "default-attempts", "max-attempts", "runtime"])
def test_a_limit_above_its_ceiling_is_refused_at_load_with_the_reason(tmp_path, sections, message):
    with pytest.raises(ConfigError) as refused:
        load_config(_configuration(tmp_path, **sections))
    assert message in str(refused.value)


def test_limits_at_their_ceilings_load(tmp_path):
    config = load_config(_configuration(
        tmp_path, limits={"max_message_bytes": 366_000, "max_runtime_s": 2**31 - 1, "max_array_tasks": 10**6},
        attempts={"default_max_attempts": 10**6, "max_max_attempts": 10**6}))
    assert (config.limits.max_message_bytes, config.attempts.default_max_attempts) == (366_000, 10**6)


def test_the_largest_message_the_limit_lets_through_is_an_event_a_function_is_given():
    """A payload at the ceiling of ``limits.max_message_bytes``, as Eventarc gives it to a function (base64, in a
    CloudEvent), with the most attributes Zen's messages carry (an agent's token in 16 pieces, its key and signature)
    and the longest names Pub/Sub allows, fits Google's 512 KB: a ceiling of 512,000 payload bytes let through
    events of 683 KB, published after `zen submit`'s check and never given to on_job_submitted."""
    from zen.adapters.message_key import KEY_ATTRIBUTE, PIECE_CHARS, SIGNATURE_ATTRIBUTE, token_attributes
    from zen.core.eventarc import binary_request, pubsub_cloud_event, structured_request
    from zen.core.limits import CEILINGS, EVENTARC_EVENT_BYTES

    most = CEILINGS["limits.max_message_bytes"][0]
    attributes = {**token_attributes("t" * 16 * PIECE_CHARS), KEY_ATTRIBUTE: "k" * 1000,
                  SIGNATURE_ATTRIBUTE: "s" * 1000, "kind": "job", "vm": "v" * 63}
    for size in (most - 2, most - 1, most):  # each base64 padding
        event = pubsub_cloud_event(b"x" * size, message_id="9" * 256, topic="t" * 255, project="p" * 30,
                                   attributes=attributes,
                                   subscription=f"projects/{'p' * 30}/subscriptions/{'s' * 255}")
        for body, headers in (structured_request(event), binary_request(event)):
            assert len(body) + sum(len(k) + len(v) for k, v in headers.items()) <= EVENTARC_EVENT_BYTES, size


def test_zen_submit_publishes_no_job_whose_event_no_function_would_be_given(tmp_path, config, publisher, db_url,
                                                                           monkeypatch, capsys):
    """A deployment's limit of 400,000 payload bytes: `zen submit` checked a 390 KB job against it, said "submitted",
    and its event (520 KB in base64) was never given to on_job_submitted, which neither took nor refused it. Now the
    configuration is refused, saying why, and nothing is published."""
    from zen.cli.main import main

    monkeypatch.setenv("ZEN_CONFIG", _configuration(tmp_path, limits={"max_message_bytes": 400_000}))
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    job = ["submit", "--user", "alice", "--cluster", "1xl4", "--env", f"BLOB={'x' * 390_000}", "--", "python", "t.py"]
    assert main(job) == 1
    assert "limits.max_message_bytes: 400000 is above 366000" in capsys.readouterr().err
    assert publisher.on("zen-job-submitted") == []


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
