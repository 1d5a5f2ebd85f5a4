"""A queue's preemption (``job.preempted``) told as a PREEMPTED notice: not when the attempt it took back ended by
itself first (finished in the stop's grace, killed at its limit, or stopped by its user): no rerun came, and the
job's end is its notice, as for a lost attempt whose late report ended the job (tests/test_notifications.py)."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat
from tests.notify_support import notifying_config
from tests.test_notifications import deliver_all, events, hook, sink, secret_manager  # noqa: F401 - fixtures
from tests.test_queues import COHORT, attempt_of, borrow_all_and_reclaim, statuses, stop_answer
from zen.app import Zen
from zen.core.config import ZenConfig


@pytest.fixture
def reclaiming(config, db, publisher, clock, db_url, secret_manager, monkeypatch):  # noqa: F811 - the fixture
    """team-a borrows team-b's quota and team-b reclaims it (tests/test_queues.py); every team-a job (a0..a3)
    notifies the sink's hook of its preemption and its end."""
    from zen_dev.local.invoke import FunctionsInvoker

    allowed = [f"projects/{config.project}/secrets/zen-notify-*/versions/*"]
    queues = [{**COHORT[0], "secrets": allowed, "notify": [hook(config, on=["PREEMPTED", "SUCCEEDED", "FAILED",
                                                                              "CANCELLED"])]},
              {**COHORT[1], "preemption": "reclaim-borrowed", "secrets": allowed}]
    monkeypatch.setenv("ZEN_SECRETS_ENDPOINT", secret_manager.endpoint)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen = Zen(ZenConfig.model_validate({**notifying_config(config).model_dump(), "queues": queues}), db, publisher,
              clock)
    functions = FunctionsInvoker(zen)
    borrow_all_and_reclaim(functions, clock)  # a3 (vm-3) is told to stop: taken back for team-b's b1
    assert statuses(zen, "a3") == ["STOPPING"]
    return zen, functions


def told(sink, job_id):  # noqa: F811 - the sink fixture's WebhookSink
    return [(r["body"]["event"], r["body"]["attempt"]) for r in sink.on("hook") if r["body"]["job_id"] == job_id]


@pytest.mark.parametrize("final, exit_code, over_limit", [
    ("SUCCEEDED", 0, None),                 # it finished in the stop's grace
    ("FAILED", 137, "max_runtime_s"),       # killed at its own limit meanwhile
])
def test_a_preemption_the_attempt_ended_before_is_told_as_its_end_only(reclaiming, publisher, sink, clock, final,
                                                                       exit_code, over_limit):
    """Its notices delivered after its end (a redelivery's backoff, a notifier down a minute): "a3 was preempted
    (attempt 1)" was sent after "a3 succeeded (attempt 1)", a job that finished looking taken back."""
    zen, functions = reclaiming
    extra = {"over_limit": over_limit} if over_limit else {}
    functions.heartbeat(heartbeat("a3", final, 9, vm="vm-3", exit_code=exit_code, **extra))
    assert statuses(zen, "a3") == [final] and attempt_of(zen, "a3")[0] == 1

    assert set(deliver_all(functions, events(publisher))) == {200}
    assert told(sink, "a3") == [(final, 1)]


def test_a_preemption_its_user_stop_ended_is_told_as_cancelled_only(reclaiming, publisher, sink):
    zen, functions = reclaiming
    functions.stop({"job_id": "a3"})
    functions.heartbeat(stop_answer("a3", "vm-3"))
    assert statuses(zen, "a3") == ["CANCELLED"]

    deliver_all(functions, events(publisher))
    assert told(sink, "a3") == [("CANCELLED", 1)]


def test_a_preemption_that_took_the_attempt_back_is_told_with_its_rerun(reclaiming, publisher, sink):
    zen, functions = reclaiming
    functions.heartbeat(stop_answer("a3", "vm-3"))  # stopped (SIGTERM, grace): back to PENDING as attempt 2
    assert statuses(zen, "a3") == ["PENDING"]

    deliver_all(functions, events(publisher))
    [(event, attempt)] = told(sink, "a3")
    [notice] = [r["body"] for r in sink.on("hook") if r["body"]["job_id"] == "a3"]
    assert (event, attempt) == ("PREEMPTED", 1) and notice["text"].endswith("rerun as attempt 2")
