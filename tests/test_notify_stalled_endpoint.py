"""An endpoint that never answers costs the notifier one timeout per while, not one per notice.

The notifier's requests are few (terraform: 2 instances of 8 at once) and a POST waits up to
``notifications.timeout_s``: an array of many jobs telling one endpoint that hangs held a request for the whole
timeout on every delivery and every redelivery of every task's event, so every other user's notices queued
behind them. A target that gave no answer is now not tried again until a short, growing while has passed (its
notices recorded failed at once and redelivered by Pub/Sub as before), then by one delivery at a time, until it
answers. Slots are counted as the POSTs that waited the whole timeout (the sink's "hang" answers), not as time."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.messages import job_request
from tests.test_notifications import (deliver, events, hook, ledger, notifying, run_to,  # noqa: F401
                                      secret_manager, sink)
from zen.store.notifications import PostgresNotifications

TASKS = 6


def failed_events(publisher, job_ids):
    """Each job's FAILED event (the notice), in the jobs' order."""
    read = [(json.loads(m.data), m) for m in events(publisher)]
    found = {event["job_id"]: m for event, m in read if event.get("to_status") == "FAILED"}
    return [found[job_id] for job_id in job_ids]


def hung(sink, name="hook"):  # noqa: F811 - the sink fixture's WebhookSink
    """The POSTs to ``name`` that waited the whole timeout: each one a notifier request held that long."""
    return [r for r in sink.on(name) if r["answer"] == "hang"]


def test_an_endpoint_that_does_not_answer_costs_one_timeout_per_while_not_one_per_notice(
        notifying, publisher, sink, config, clock):
    zen, functions = notifying
    tasks = [f"arr-{i}" for i in range(TASKS)]
    for job_id in tasks:  # one user's array, each task telling the same endpoint of its end
        functions.submit(job_request(job_id, notify=[hook(config, on=["FAILED"])]))
        run_to(functions, job_id, "FAILED", exit_code=1)
    functions.submit(job_request("other-1", user_id="bob",
                                 notify=[hook(config, "zen-notify-slack", on=["FAILED"])]))
    run_to(functions, "other-1", "FAILED", exit_code=1)
    sink.script = ["hang"] * TASKS  # the endpoint answers nothing (within the 1 s timeout) for a while

    codes = [deliver(functions, m, f"first-{i}").status_code for i, m in enumerate(failed_events(publisher, tasks))]
    sink.script = []  # what is left of it was for the silent endpoint: another user's endpoint answers
    [others] = failed_events(publisher, ["other-1"])
    other = deliver(functions, others, "other-first")

    assert codes == [500] * TASKS  # every task's notice failed: Pub/Sub redelivers each
    assert len(hung(sink)) == 1, f"{len(hung(sink))} of {TASKS} notices to the silent endpoint waited the whole timeout"
    assert other.status_code == 200 and [r["answer"] for r in sink.on("slack")] == [200]
    rows = [row for job_id in tasks for row in ledger(zen, job_id)]
    assert [r["state"] for r in rows] == ["failed"] * TASKS
    assert rows[0]["detail"] == "no answer within 1 s"
    assert all(r["detail"].startswith("not tried: its endpoint gave no answer lately") for r in rows[1:])

    # the endpoint is back; the redeliveries come after their backoff
    clock.advance(11)
    again = [deliver(functions, m, f"first-{i}").status_code for i, m in enumerate(failed_events(publisher, tasks))]

    assert again == [200] * TASKS  # none lost: each told once, in one POST
    assert sorted(r["body"]["job_id"] for r in sink.on("hook") if r["answer"] == 200) == sorted(tasks)
    assert [r["state"] for job_id in tasks for r in ledger(zen, job_id)] == ["sent"] * TASKS


def test_a_probe_that_gets_no_answer_again_doubles_the_while(notifying, publisher, sink, config, clock):
    zen, functions = notifying
    tasks = [f"dbl-{i}" for i in range(4)]
    for job_id in tasks:
        functions.submit(job_request(job_id, notify=[hook(config, on=["FAILED"])]))
        run_to(functions, job_id, "FAILED", exit_code=1)
    first, second, third, fourth = failed_events(publisher, tasks)
    sink.script = ["hang"] * 4

    codes = [deliver(functions, first, "a").status_code]  # no answer: not tried for 10 s
    clock.advance(11)
    codes.append(deliver(functions, second, "b").status_code)  # the one try after 10 s: no answer again, 20 s
    clock.advance(11)
    codes.append(deliver(functions, third, "c").status_code)  # 11 s into the 20: not tried
    assert (codes, len(hung(sink))) == ([500, 500, 500], 2)

    sink.script = []
    clock.advance(10)
    codes = [deliver(functions, third, "c").status_code, deliver(functions, fourth, "d").status_code]
    assert codes == [200, 200] and len(sink.on("hook")) == 4  # an answer ends the wait: the next goes at once


def test_one_delivery_at_a_time_tries_an_endpoint_whose_while_is_over(db, clock):
    """Deliveries of several instances at once: after the while, one tries the endpoint, the others do not wait
    the timeout with it; a try whose instance died frees the endpoint after its hold."""
    ledger_ = PostgresNotifications(db)
    target, now = "webhook projects/p/secrets/zen-notify-x/versions/latest", clock()
    assert ledger_.gate(target, now, hold_s=50) == ("open", None)
    retry_at = ledger_.stalled(target, now)
    assert retry_at == now + timedelta(seconds=10)
    assert ledger_.stalled(target, now + timedelta(seconds=1)) == retry_at  # one at the same time: the same while
    assert ledger_.gate(target, now + timedelta(seconds=5), hold_s=50) == ("wait", retry_at)

    later = now + timedelta(seconds=10)
    assert ledger_.gate(target, later, hold_s=50) == ("probe", later + timedelta(seconds=50))
    assert ledger_.gate(target, later, hold_s=50) == ("wait", later + timedelta(seconds=50))
    died = later + timedelta(seconds=51)
    assert ledger_.gate(target, died, hold_s=50) == ("probe", died + timedelta(seconds=50))  # the first one died
    ledger_.untried(target, died + timedelta(seconds=50))  # its secret could not be read: no POST
    assert ledger_.gate(target, died, hold_s=50) == ("probe", died + timedelta(seconds=50))
    ledger_.answered(target)
    assert ledger_.gate(target, later + timedelta(seconds=52), hold_s=50) == ("open", None)


def test_a_notifier_not_granted_the_endpoints_table_yet_tries_every_post(db, clock):
    """Upgraded before ``db_grants_sql`` was run again (the notifier may not use notification_endpoints: shown here by
    the table's absence, the same refusal as far as the notifier can tell): every POST is tried, as before migration
    0059, rather than every delivery failing until the grants are run."""
    ledger_ = PostgresNotifications(db)
    target, now = "webhook projects/p/secrets/zen-notify-x/versions/latest", clock()
    with db.transaction() as session:
        session.execute("ALTER TABLE notification_endpoints RENAME TO notification_endpoints_away")
    try:
        assert ledger_.stalled(target, now) is None
        assert ledger_.gate(target, now, hold_s=50) == ("open", None)
        ledger_.answered(target)
        ledger_.untried(target, now)
        ledger_.prune(now)
    finally:
        with db.transaction() as session:
            session.execute("ALTER TABLE notification_endpoints_away RENAME TO notification_endpoints")


def test_no_connection_is_no_answer_and_an_answer_that_is_not_http_is_one():
    """What holds an endpoint's notices back: no connection (or no answer in time), not a wrong answer."""
    import socket

    from tests.test_notify_edge import GarbageServer
    from zen.adapters.webhooks import HttpPoster
    from zen.core.notify import DeliveryFailed, NoAnswer

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(NoAnswer, match="connection refused"):
        HttpPoster().post(f"http://127.0.0.1:{port}/hook", {}, {}, timeout_s=1)
    garbage = GarbageServer()
    with pytest.raises(DeliveryFailed, match="its answer was not HTTP") as failure:
        HttpPoster().post(garbage.url, {}, {}, timeout_s=1)
    garbage.close()
    assert not isinstance(failure.value, NoAnswer)
