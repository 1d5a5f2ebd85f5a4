"""A webhook URL holding user:password@ and an email to an address the configuration no longer allows are refused
once, recorded "refused", never sent (the first was retried, "failed", until the dead letter; the second was mailed)."""
from __future__ import annotations

import json

import pytest

from tests.messages import job_request
from tests.notify_support import TOKEN, WebhookSink, notifying_config, secret
from tests.test_notifications import deliver_all, events, ledger, run_to
from tests.test_notify_edge import failed_notice
from zen.adapters.webhooks import HttpPoster
from zen.app import Zen
from zen.core.config import ZenConfig
from zen.core.errors import TransientError
from zen.jobs.notifications import Notifier
from zen.store import notifications
from zen.store.notifications import PostgresNotifications


@pytest.mark.parametrize("url", [
    "https://ci:s3cr3t@hooks.example.com/hook",       # basic auth in the URL (Jenkins, Alertmanager-style receivers)
    "https://ci:s3cr3t@hooks.example.com:8443/hook",
])
def test_a_webhook_url_with_credentials_is_refused_once_not_retried_to_the_dead_letter(
        config, db, publisher, clock, db_url, monkeypatch, url):
    """urllib hands "ci:s3cr3t@hooks.example.com" to http.client as the host: no request is made. Let through, the row
    said "failed" ("its answer was not HTTP" / "its host name does not resolve", a server that never saw a request)
    and every delivery answered 500 until the dead letter."""
    cfg = notifying_config(config)
    ref = f"{secret(cfg, 'zen-notify-hook')}/versions/latest"
    notifier = Notifier(cfg, PostgresNotifications(db), {ref: url}.__getitem__, HttpPoster(), clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    envelope = failed_notice(cfg, db, publisher, clock, notifier, "userinfo", ref)
    answers = []
    for _ in range(2):
        try:
            notifier.handle(envelope)
            answers.append(200)
        except TransientError:
            answers.append(500)
    with db.transaction() as session:
        [row] = notifications.of_job(session, "userinfo")
    assert (answers, row["state"]) == ([200, 200], "refused"), (answers, row["state"], row["tries"], row["detail"])


def test_an_email_to_an_address_no_longer_allowed_is_not_sent(config, db, publisher, clock, db_url, monkeypatch):
    """A job submitted while ``recipients`` allowed its address; the operator then narrows ``recipients`` (a
    contractor's domain dropped). The notifier checks the recipients again as it sends, as it checks that email is
    configured at all: the mail went out to the address the configuration now forbids."""
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    with WebhookSink() as sink:
        key = f"{secret(config, 'zen-notify-sendgrid')}/versions/latest"

        def configured(recipients):
            mailing = notifying_config(config).model_dump()
            mailing["notifications"]["email"] = {"api_url": sink.url("mail"), "api_key_secret": key,
                                                 "sender": "zen@example.com", "recipients": recipients}
            return ZenConfig.model_validate(mailing)

        then = configured(["*@example.com", "*@contractor.example"])
        functions = FunctionsInvoker(Zen(then, db, publisher, clock))
        functions.submit(job_request("mail-2", notify=[{"email": "bob@contractor.example", "on": ["FAILED"]}]))
        run_to(functions, "mail-2", "FAILED", exit_code=3)

        now = configured(["*@example.com"])
        notifier = Notifier(now, PostgresNotifications(db), {key: f"SG.{TOKEN}"}.__getitem__, HttpPoster(), clock)
        functions = FunctionsInvoker(Zen(now, db, publisher, clock, notifier=notifier))
        codes = deliver_all(functions, events(publisher))

        assert set(codes) == {200}
        assert [m["body"]["personalizations"] for m in sink.on("mail")] == [], "mailed an address recipients forbids"
        [row] = ledger(Zen(now, db, publisher, clock, notifier=notifier), "mail-2")
        assert row["state"] == "refused"
