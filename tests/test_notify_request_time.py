"""The notifier's request has the function's time (``ZEN_FUNCTION_TIMEOUT_S``, terraform's ``notifier.timeout_s``):
an event's targets are tried one after another, each up to its secret's read and one POST (``notifications.timeout_s``,
up to 60 s) and the job's earlier notices to it, so eight slow targets ran past it. The function was then cut off
in the middle of a POST and Pub/Sub took the event for failed all the same. A target after the first is started only
while its claim's hold ends inside the request; the others are left to the event's redelivery."""

from __future__ import annotations

import json

import pytest

from tests.messages import agent_run, job_request
from tests.notify_support import WebhookSink, notifying_config, secret
from zen.adapters.webhooks import HttpPoster
from zen.app import Zen
from zen.core.errors import TransientError
from zen.core.events import PubSubEnvelope
from zen.jobs.notifications import Notifier
from zen.store import notifications
from zen.store.notifications import PostgresNotifications


# 35 s: the second target's hold (34 s) ends past the request once the first took 1.2 s; 30 s: past it even at the
# request's start, so that only the target tried first fits a request, and a redelivery's first try is the second
# (the first, told already, skipped: no try), where it was never sent.
@pytest.mark.parametrize("request_s", [35.0, 30.0])
def test_a_target_whose_post_could_outlast_the_request_waits_for_the_redelivery(config, db, publisher, clock,
                                                                                 db_url, monkeypatch, request_s):
    from zen_dev.local.invoke import FunctionsInvoker

    cfg = notifying_config(config, timeout_s=2.0)  # a claim's hold: 2 x 2 s + 30 s = 34 s
    slow, other = (f"{secret(cfg, name)}/versions/latest" for name in ("zen-notify-slow", "zen-notify-other"))
    with WebhookSink(hang_s=1.2) as sink:
        urls = {slow: sink.url("slow"), other: sink.url("other")}
        notifier = Notifier(cfg, PostgresNotifications(db), urls.__getitem__, HttpPoster(), clock, timeout_s=request_s)
        functions = FunctionsInvoker(Zen(cfg, db, publisher, clock, notifier=notifier))
        monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
        functions.submit(job_request("rt-1", notify=[{"webhook": slow, "on": ["FAILED"]},
                                                     {"webhook": other, "on": ["FAILED"]}]))
        for beat in agent_run("rt-1", final="FAILED", exit_code=3):
            functions.heartbeat(beat)
        [final] = [m for m in publisher.on("zen-job-events") if json.loads(m.data).get("to_status") == "FAILED"]
        envelope = PubSubEnvelope(message_id="ev-1", data=final.data, attributes=final.attributes)

        sink.script = ["hang"]  # the first target takes 1.2 s: the second's hold would end past the request
        with pytest.raises(TransientError, match="zen-notify-other"):
            notifier.handle(envelope)
        assert [len(sink.on("slow")), len(sink.on("other"))] == [1, 0]
        with db.transaction() as session:
            assert [r["state"] for r in notifications.of_job(session, "rt-1")] == ["sent"]

        outcome = notifier.handle(envelope)  # the redelivery: the first told already, the second now
        assert outcome.skipped == [f"webhook {slow}"] and outcome.sent == [f"webhook {other}"]
        assert [len(sink.on("slow")), len(sink.on("other"))] == [1, 1]
