"""The notifier (``on_job_event``) under functions-framework with real Eventarc envelopes, against a real
Postgres, the Secret Manager stand-in (the official client reads the URLs) and a local webhook sink: the
notices a job's events make, once each however often the event is delivered; an endpoint that times out
or answers 500 is retried (the function answers 500, Pub/Sub redelivers); a 4xx is recorded and not
retried; one that keeps failing ends in the dead-letter topic, through the Pub/Sub stand-in and the local
event bridge; the URL in no row and no log line."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from werkzeug.serving import make_server

from tests.agent.test_secrets import where_in_postgres
from tests.messages import agent_run, heartbeat, job_request
from tests.notify_support import TOKEN, WebhookSink, notifying_config, secret
from tests.test_queues import CLUSTER
from zen.app import Zen
from zen.core.config import ZenConfig
from zen.store import notifications
from zen_dev.local.secret_manager import SecretManagerStandIn, SecretStore


@pytest.fixture
def sink():
    with WebhookSink(hang_s=2.5) as sink:
        yield sink


@pytest.fixture
def secret_manager(config, sink):
    store = SecretStore({secret(config, "zen-notify-hook"): sink.url("hook"),
                         secret(config, "zen-notify-slack"): sink.url("slack"),
                         secret(config, "zen-notify-plain"): "http://example.com/hook",
                         secret(config, "zen-notify-hidden"): sink.url("hidden"),
                         secret(config, "zen-notify-sendgrid"): f"SG.{TOKEN}"},
                        granted=[secret(config, "zen-notify-hook"), secret(config, "zen-notify-slack"),
                                 secret(config, "zen-notify-plain"), secret(config, "zen-notify-sendgrid")])
    with SecretManagerStandIn(store) as standin:
        yield standin


@pytest.fixture
def notifying(config, db, publisher, clock, db_url, secret_manager, monkeypatch):
    """A Zen whose jobs may name zen-notify-* secrets, its notifier reading them from the stand-in; and its
    functions under functions-framework."""
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_SECRETS_ENDPOINT", secret_manager.endpoint)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen = Zen(notifying_config(config), db, publisher, clock)
    return zen, FunctionsInvoker(zen)


def hook(config, name="zen-notify-hook", **extra):
    return {"webhook": f"{secret(config, name)}/versions/latest", **extra}


def events(publisher, seen: int = 0):
    return publisher.on("zen-job-events")[seen:]


def deliver(functions, message, message_id: str):
    """One delivery of a zen-job-events message to the notifier, as Eventarc makes it."""
    return functions.send("on_job_event", message.data, attributes=message.attributes, message_id=message_id)


def deliver_all(functions, messages, prefix="d"):
    return [deliver(functions, m, f"{prefix}-{i}").status_code for i, m in enumerate(messages)]


def ledger(zen, job_id):
    with zen.db.transaction() as session:
        return notifications.of_job(session, job_id)


def run_to(functions, job_id, final, exit_code=0):
    for beat in agent_run(job_id, final=final, exit_code=exit_code):
        functions.heartbeat(beat)


def test_a_failed_job_notifies_its_webhook_and_slack_once_however_often_delivered(notifying, publisher, sink, config):
    zen, functions = notifying
    slack = {"slack": f"{secret(config, 'zen-notify-slack')}/versions/latest", "on": ["FAILED"]}
    functions.submit(job_request("nf-1", notify=[hook(config), slack], labels={"sweep": "lr"}))
    run_to(functions, "nf-1", "FAILED", exit_code=3)

    codes = deliver_all(functions, events(publisher))
    again = deliver_all(functions, events(publisher), prefix="again")  # every event redelivered

    assert set(codes) == {200} and set(again) == {200}
    [webhook] = sink.on("hook")
    body = webhook["body"]
    assert (body["type"], body["event"], body["job_id"], body["attempt"], body["exit_code"], body["status"]) == (
        "zen.notification", "FAILED", "nf-1", 1, 3, "FAILED")
    assert body["labels"] == {"sweep": "lr"} and body["user_id"] == "alice" and body["cluster"] == CLUSTER
    assert webhook["headers"]["Zen-Delivery"] == body["id"]
    [message] = sink.on("slack")
    assert message["body"]["text"].startswith(":x: Zen job nf-1 failed (attempt 1, exit code 3")
    rows = ledger(zen, "nf-1")
    assert [(r["event"], r["state"], r["tries"], r["detail"]) for r in rows] == [("FAILED", "sent", 1, "HTTP 200")] * 2
    assert sorted(r["target"] for r in rows) == sorted([f"webhook {secret(config, 'zen-notify-hook')}/versions/latest",
                                                        f"slack {secret(config, 'zen-notify-slack')}/versions/latest"])


def test_a_succeeded_job_tells_only_the_targets_that_asked(notifying, publisher, sink, config):
    zen, functions = notifying
    functions.submit(job_request("ok-1", notify=[hook(config, on=["SUCCEEDED"]),
                                                 {**hook(config, "zen-notify-slack"), "on": ["FAILED"]}]))
    run_to(functions, "ok-1", "SUCCEEDED")
    deliver_all(functions, events(publisher))
    assert [r["body"]["event"] for r in sink.on("hook")] == ["SUCCEEDED"] and sink.on("slack") == []


def test_a_preempted_attempt_is_told_with_its_rerun(notifying, publisher, sink, config):
    zen, functions = notifying
    functions.submit(job_request("pre-1", notify=[hook(config, on=["PREEMPTED", "SUCCEEDED"])]))
    for status, seq in (("CLAIMED", 1), ("RUNNING", 2), ("PREEMPTED", 3)):
        functions.heartbeat(heartbeat("pre-1", status, seq))
    deliver_all(functions, events(publisher))

    [notice] = sink.on("hook")
    assert notice["body"]["event"] == "PREEMPTED" and notice["body"]["attempt"] == 1
    assert "was preempted" in notice["body"]["reason"] and notice["body"]["text"].endswith("rerun as attempt 2")


def test_each_preemption_notice_names_its_own_rerun(notifying, publisher, sink, config):
    """Attempts 1 and 2 preempted, the notices delivered after both (a redelivery's backoff, a notifier down for a
    minute): both said "rerun as attempt 3", the job's attempt when sent."""
    zen, functions = notifying
    functions.submit(job_request("pp-1", notify=[hook(config, on=["PREEMPTED"])]))
    for attempt in (1, 2):
        for status, seq in (("CLAIMED", 1), ("RUNNING", 2), ("PREEMPTED", 3)):
            functions.heartbeat(heartbeat("pp-1", status, seq, attempt=attempt, vm=f"vm-{attempt}"))
    deliver_all(functions, events(publisher))
    told = sorted((r["body"]["attempt"], r["body"]["text"].rsplit("; ", 1)[-1]) for r in sink.on("hook"))
    assert told == [(1, "rerun as attempt 2"), (2, "rerun as attempt 3")]


@pytest.mark.parametrize("final_status, exit_code", [("SUCCEEDED", 0), ("FAILED", 3)])
def test_a_lost_attempt_whose_late_report_ended_the_job_is_told_no_preemption(notifying, publisher, sink, config,
                                                                            clock, final_status, exit_code):
    """An attempt lost (no heartbeat), then its late final report ends the job (zen.jobs.late_final): no rerun
    came, so no PREEMPTED; a late SUCCEEDED was told as a preemption before its SUCCEEDED."""
    from tests.test_late_final_reports import final, run_then_go_silent

    zen, functions = notifying
    functions.submit(job_request("lf-1", notify=[hook(config)]))
    run_then_go_silent(functions, clock, "lf-1")
    clock.advance(30)
    functions.heartbeat(final("lf-1", final_status, exit_code))
    deliver_all(functions, events(publisher))
    assert [r["body"]["event"] for r in sink.on("hook")] == [final_status]


def test_a_cancelled_job_is_told_to_its_queue_targets_too(config, db, publisher, clock, db_url, secret_manager,
                                                          sink, monkeypatch):
    from zen_dev.local.invoke import FunctionsInvoker

    allowed = [f"projects/{config.project}/secrets/zen-notify-*/versions/*"]
    queues = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"], "secrets": allowed,
               "notify": [{"slack": f"{secret(config, 'zen-notify-slack')}/versions/latest", "on": ["CANCELLED"]}]}]
    monkeypatch.setenv("ZEN_SECRETS_ENDPOINT", secret_manager.endpoint)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen = Zen(ZenConfig.model_validate({**notifying_config(config).model_dump(), "queues": queues}), db, publisher, clock)
    functions = FunctionsInvoker(zen)
    functions.submit(job_request("q-1", notify=[hook(config)]))
    functions.stop({"job_id": "q-1"})
    deliver_all(functions, events(publisher))

    assert [r["body"]["event"] for r in sink.on("hook")] == ["CANCELLED"]
    assert sink.on("slack")[0]["body"]["text"].startswith(":no_entry_sign: Zen job q-1 was cancelled")


@pytest.mark.parametrize("first", ["hang", 500, 429])
def test_an_endpoint_that_times_out_or_fails_is_retried_and_then_delivered(notifying, publisher, sink, config, clock,
                                                                            first):
    zen, functions = notifying
    functions.submit(job_request("rt-1", notify=[hook(config, on=["FAILED"])]))
    run_to(functions, "rt-1", "FAILED", exit_code=1)
    [final] = [m for m in events(publisher) if json.loads(m.data).get("to_status") == "FAILED"]
    sink.script = [first]

    began = time.monotonic()
    refused = deliver(functions, final, "f-1")
    took = time.monotonic() - began
    clock.advance(10)  # Pub/Sub redelivers the same message after its backoff (terraform: 10 s at least)
    retried = deliver(functions, final, "f-1")

    assert refused.status_code == 500 and retried.status_code == 200
    assert took < 2.0  # the POST gave up after notifications.timeout_s (1 s), not the sink's 2.5 s
    assert len(sink.on("hook")) == 2 and sink.on("hook")[1]["body"]["event"] == "FAILED"
    [row] = ledger(zen, "rt-1")
    assert (row["state"], row["tries"], row["detail"]) == ("sent", 2, "HTTP 200")


def test_a_4xx_is_recorded_and_not_retried(notifying, publisher, sink, config):
    zen, functions = notifying
    functions.submit(job_request("gone-1", notify=[hook(config, on=["FAILED"])]))
    run_to(functions, "gone-1", "FAILED", exit_code=1)
    sink.script = [404]

    codes = deliver_all(functions, events(publisher)) + deliver_all(functions, events(publisher), prefix="again")

    assert set(codes) == {200}  # acked: a 404 will be a 404 again
    assert len(sink.on("hook")) == 1
    [row] = ledger(zen, "gone-1")
    assert (row["state"], row["tries"], row["detail"]) == ("refused", 1, "HTTP 404")


@pytest.mark.parametrize("name, detail", [
    ("zen-notify-hidden", "its secret: permission denied (the notifier's service account (zen-fn-notify) needs"),  # not the VM's
    ("zen-notify-plain", "its secret: its URL is plain http: give an https URL"),
])
def test_a_secret_the_notifier_cannot_use_is_recorded_and_not_retried(notifying, publisher, sink, config, name, detail):
    zen, functions = notifying
    functions.submit(job_request("sec-1", notify=[hook(config, name, on=["FAILED"])]))
    run_to(functions, "sec-1", "FAILED", exit_code=1)

    assert set(deliver_all(functions, events(publisher))) == {200}

    [row] = ledger(zen, "sec-1")
    assert row["state"] == "refused" and row["detail"].startswith(detail) and sink.received == []


def test_the_url_is_in_no_row_and_no_log_line(notifying, publisher, sink, config, db, caplog):
    zen, functions = notifying
    caplog.set_level(logging.DEBUG)
    functions.submit(job_request("hid-1", notify=[hook(config), hook(config, "zen-notify-slack")]))
    run_to(functions, "hid-1", "FAILED", exit_code=2)
    sink.script = [500, "hang", 404]
    for round_ in range(3):
        deliver_all(functions, events(publisher), prefix=f"r{round_}")

    assert len(sink.received) >= 3 and {r["answer"] for r in sink.received} >= {500, "hang", 404}
    assert where_in_postgres(db, "zen-notify-hook") != []  # the reference is there
    assert where_in_postgres(db, TOKEN) == [] and where_in_postgres(db, "127.0.0.1:") == []
    lines = [logging.Formatter("%(message)s %(args)s").format(r) + json.dumps(r.__dict__, default=str)
             for r in caplog.records]
    assert any("notification" in line for line in lines)
    assert not [line for line in lines if TOKEN in line or f":{sink.url('x').split(':')[2].split('/')[0]}/" in line]
    assert not [m for m in publisher.on("zen-job-events") if TOKEN.encode() in m.data]


# -- the dead letter, through the Pub/Sub stand-in and the local event bridge ---------------------------
@pytest.fixture
def served(notifying):
    """The notifier's functions-framework app served over HTTP in this process, as Cloud Run serves it."""
    import functions_framework

    from zen_dev.local.invoke import FUNCTIONS_MAIN
    import sys

    zen, functions = notifying
    app = functions_framework.create_app("on_job_event", str(FUNCTIONS_MAIN), "cloudevent")
    sys.modules["main"]._zen = zen
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield zen, functions, f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


def test_an_endpoint_that_keeps_failing_ends_in_the_dead_letter_topic(served, publisher, sink, config, pubsub_clients):
    from google.cloud import pubsub_v1

    from zen_dev.local.bridge import DeliveryPolicy, EventBridge, Route, ensure_topic

    zen, functions, url = served
    functions.submit(job_request("dl-1", notify=[hook(config, on=["FAILED"])]))
    run_to(functions, "dl-1", "FAILED", exit_code=1)
    [final] = [m for m in events(publisher) if json.loads(m.data).get("to_status") == "FAILED"]
    publisher_client, subscriber = pubsub_clients
    topic = "zen-notify-test-events"  # its own topic: only this event goes through the bridge
    dead = ensure_topic(publisher_client, config.project, f"{topic}-dead-letter")
    kept = subscriber.subscription_path(config.project, "kept-dead-letters")
    subscriber.create_subscription(name=kept, topic=dead)
    sink.script = [503] * 50
    policy = DeliveryPolicy(max_delivery_attempts=5, minimum_backoff_s=0.1, maximum_backoff_s=0.2)

    with EventBridge(config.project, [Route(topic, url)], policy, publisher=publisher_client,
                     subscriber=pubsub_v1.SubscriberClient()):
        publisher_client.publish(publisher_client.topic_path(config.project, topic), final.data,
                                 **final.attributes).result(timeout=10)
        deadline, dead_letters = time.monotonic() + 30, []
        while not dead_letters and time.monotonic() < deadline:
            dead_letters = subscriber.pull(subscription=kept, max_messages=10, timeout=5).received_messages
            time.sleep(0.2)

    assert [json.loads(m.message.data)["job_id"] for m in dead_letters] == ["dl-1"]
    assert len(sink.on("hook")) == 5  # one POST per delivery attempt, then no more
    [row] = ledger(zen, "dl-1")
    assert (row["state"], row["tries"], row["detail"]) == ("failed", 5, "HTTP 503")


def test_the_notifier_subscription_filter_lets_through_only_what_can_be_a_notice(notifying, publisher, config,
                                                                                  pubsub_clients):
    """NOTICE_FILTER (terraform's and the local stack's) on the Pub/Sub stand-in, against a job's real events."""
    from google.pubsub_v1 import types as T

    from zen.core.notify import NOTICE_FILTER, notice_of

    zen, functions = notifying
    publisher_client, subscriber = pubsub_clients
    filtered = subscriber.subscription_path(config.project, "notices-only")
    subscriber.create_subscription(request=T.Subscription(
        name=filtered, topic=publisher_client.topic_path(config.project, "zen-job-events"), filter=NOTICE_FILTER))
    functions.submit(job_request("flt-1"))
    for status, seq in (("CLAIMED", 1), ("RUNNING", 2), ("PREEMPTED", 3)):
        functions.heartbeat(heartbeat("flt-1", status, seq))
    for beat in agent_run("flt-1", attempt=2, final="FAILED", exit_code=1):
        functions.heartbeat(beat)

    everything = [json.loads(m.data) for m in events(publisher)]
    passed = [json.loads(m.message.data) for m in subscriber.pull(subscription=filtered, max_messages=100,
                                                                   timeout=10).received_messages]
    assert len(everything) > len(passed) >= 2
    assert sorted(e["to_status"] for e in passed) == sorted(e["to_status"] for e in everything if notice_of(e))


def test_email_goes_through_the_sendgrid_style_api_with_the_key_from_its_secret(
        config, db, publisher, clock, db_url, secret_manager, sink, monkeypatch, caplog):
    from zen_dev.local.invoke import FunctionsInvoker

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("ZEN_SECRETS_ENDPOINT", secret_manager.endpoint)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    mailing = notifying_config(config).model_dump()
    mailing["notifications"]["email"] = {
        "api_url": sink.url("mail"), "api_key_secret": f"{secret(config, 'zen-notify-sendgrid')}/versions/latest",
        "sender": "zen@example.com", "recipients": ["*@example.com"]}
    zen = Zen(ZenConfig.model_validate(mailing), db, publisher, clock)
    functions = FunctionsInvoker(zen)
    functions.submit(job_request("mail-1", notify=[{"email": "alice@example.com", "on": ["SUCCEEDED"]}]))
    run_to(functions, "mail-1", "SUCCEEDED")

    deliver_all(functions, events(publisher))

    [mail] = sink.on("mail")
    assert mail["headers"]["Authorization"] == f"Bearer SG.{TOKEN}"
    assert mail["body"]["personalizations"] == [{"to": [{"email": "alice@example.com"}]}]
    assert mail["body"]["from"] == {"email": "zen@example.com"}
    assert mail["body"]["subject"] == "Zen job mail-1 succeeded"
    assert mail["body"]["content"][0]["value"].startswith("Zen job mail-1 succeeded (attempt 1, exit code 0")
    [row] = ledger(zen, "mail-1")
    assert (row["target"], row["state"]) == ("email alice@example.com", "sent")
    assert where_in_postgres(db, TOKEN) == []
    assert not [r for r in caplog.records if TOKEN in r.getMessage() + json.dumps(r.__dict__, default=str)]


def test_a_reason_in_slack_is_text_not_a_mention_or_a_link(notifying, publisher, sink, config):
    """A stop's reason is its sender's words: "<!channel>" in it pinged the whole channel, and
    "<https://...|text>" showed a link under words Zen did not write. Slack's own escapes keep them text."""
    zen, functions = notifying
    slack = {"slack": f"{secret(config, 'zen-notify-slack')}/versions/latest", "on": ["CANCELLED"]}
    functions.submit(job_request("sl-1", notify=[slack]))
    functions.stop({"job_id": "sl-1", "reason": "<!channel> see <https://x.example/|the docs> & retry"})
    deliver_all(functions, events(publisher))
    [message] = sink.on("slack")
    text = message["body"]["text"]
    assert "&lt;!channel&gt; see &lt;https://x.example/|the docs&gt; &amp; retry" in text and "<" not in text
