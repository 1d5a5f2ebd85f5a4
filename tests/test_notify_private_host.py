"""A webhook URL whose host is a name (no address literal, no ``localhost`` or ``*.internal``) that resolves to a
private address: refused as it is sent, and nothing connected to. The poster's public-only connection was set on the
connection's class, where http.client's own per-connection ``_create_connection`` hid it: every name was connected
to wherever it resolved (the VPC, this machine), and the row said "failed", retried to the dead letter."""
from __future__ import annotations

import socket

from tests.notify_support import notifying_config, resolving, secret
from tests.test_notify_edge import failed_notice
from zen.adapters.webhooks import HttpPoster
from zen.core.errors import TransientError
from zen.core.notify import DeliveryFailed, DeliveryRefused, url_problem
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
    url = f"https://{HOST}:{port}/hook"
    assert url_problem(url) is None  # a name: only its address, as it is connected to, says where it leads
    cfg = notifying_config(config)
    ref = f"{secret(cfg, 'zen-notify-hook')}/versions/latest"
    notifier = Notifier(cfg, PostgresNotifications(db), {ref: url}.__getitem__, HttpPoster(), clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    envelope = failed_notice(cfg, db, publisher, clock, notifier, "private-host", ref)
    resolving(monkeypatch, HOST, "127.0.0.1")
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


def test_a_proxy_the_environment_names_is_not_what_the_public_address_check_reads(monkeypatch):
    """With ``HTTPS_PROXY`` set, urllib connected to the proxy, and the public-only connection checked the proxy's
    address: a proxy in the VPC had every webhook refused for good ("its URL's host resolves to a private
    address", never retried), a public one left the webhook's own address unchecked. The webhooks' poster
    connects to the webhook's host itself; the operator's email API still goes through the proxy."""
    public, proxy = "93.184.216.34", ("10.8.0.2", 3128)
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, f"http://{proxy[0]}:{proxy[1]}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    real_connect, peers = socket.socket.connect, []

    def connect(sock, peer):
        if peer in ((public, 443), proxy):  # nothing of the test's network: recorded, refused
            peers.append(peer)
            raise ConnectionRefusedError()
        return real_connect(sock, peer)

    resolving(monkeypatch, "hooks.public.example", public)
    monkeypatch.setattr(socket.socket, "connect", connect)

    def outcome(poster: HttpPoster) -> str:
        try:
            return str(poster.post("https://hooks.public.example/hook", {"x": 1}, {}, 1.0))
        except (DeliveryFailed, DeliveryRefused) as exc:
            return f"{type(exc).__name__}: {exc}"

    assert (outcome(HttpPoster()), peers) == ("NoAnswer: connection refused", [(public, 443)])
    peers.clear()
    assert (outcome(HttpPoster(public_only=False)), peers) == ("NoAnswer: connection refused", [proxy])
