"""A webhook URL whose host is a name (no address literal, no ``localhost`` or ``*.internal``) that resolves to a
private address: refused as it is sent, and nothing connected to. The poster's public-only connection was set on the
connection's class, where http.client's own per-connection ``_create_connection`` hid it: every name was connected
to wherever it resolved (the VPC, this machine), and the row said "failed", retried to the dead letter."""
from __future__ import annotations

import socket

from tests.notify_support import notifying_config, secret
from tests.test_notify_edge import failed_notice
from zen.adapters.webhooks import HttpPoster
from zen.core.errors import TransientError
from zen.core.notify import url_problem
from zen.jobs.notifications import Notifier
from zen.store import notifications
from zen.store.notifications import PostgresNotifications

HOST = "hooks.team-alerts.example"  # a name its owner pointed at a private address


def test_a_webhook_name_resolving_to_a_private_address_is_refused_and_not_connected_to(
        config, db, publisher, clock, db_url, monkeypatch):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    real = socket.getaddrinfo

    def getaddrinfo(host, port_, *args, **kwargs):
        if host == HOST:
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", port_))]
        return real(host, port_, *args, **kwargs)

    url = f"https://{HOST}:{port}/hook"
    assert url_problem(url) is None  # a name: only its address, as it is connected to, says where it leads
    cfg = notifying_config(config)
    ref = f"{secret(cfg, 'zen-notify-hook')}/versions/latest"
    notifier = Notifier(cfg, PostgresNotifications(db), {ref: url}.__getitem__, HttpPoster(), clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    envelope = failed_notice(cfg, db, publisher, clock, notifier, "private-host", ref)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    answers = []
    try:
        for _ in range(2):  # a second delivery changes nothing
            try:
                notifier.handle(envelope)
                answers.append(200)
            except TransientError:
                answers.append(500)
        listener.setblocking(False)
        try:
            connection, peer = listener.accept()  # a connection made is in the backlog by now
            connection.close()
            reached = [peer]
        except BlockingIOError:
            reached = []
    finally:
        listener.close()
    with db.transaction() as session:
        [row] = notifications.of_job(session, "private-host")
    assert (reached, answers, row["state"]) == ([], [200, 200], "refused"), (reached, answers, row["detail"])
    assert "private address" in row["detail"] and HOST not in row["detail"], row["detail"]
