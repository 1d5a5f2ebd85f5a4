"""What leaves Zen for notifications and what its edge announces, where it went wrong before: webhook URLs
naming this machine or the metadata server in forms the check did not read, one target answering something
that is not HTTP blocking every other target of the event, unreadable job events answered 500 until the
dead letter, and a bad envelope on the heartbeats or stops announced as a refused submission."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from tests.messages import agent_run, job_request
from tests.notify_support import WebhookSink, notifying_config, resolving, secret
from zen.adapters.webhooks import HttpPoster
from zen.app import Zen
from zen.core.events import PubSubEnvelope
from zen.core.notify import DeliveryFailed, DeliveryRefused, url_problem
from zen.jobs.notifications import Notifier
from zen.store import notifications, repository
from zen.store.notifications import PostgresNotifications


# -- 1. SSRF: a webhook URL naming a loopback / link-local / internal host was posted to ---------------------
# zen.core.notify.url_problem refused "an IP literal of a private range" only when ipaddress parsed it. The
# resolver reads more forms as IP literals (inet_aton: 127.1, 2130706433, 0x7f.1 are all 127.0.0.1), and
# names (localhost, metadata.google.internal) were never looked at, so the notifier POSTed to them over https.
@pytest.mark.parametrize("url", [
    "https://127.1/hook",                                   # 127.0.0.1 to getaddrinfo
    "https://2130706433/hook",                              # 127.0.0.1 (decimal)
    "https://2852039166/computeMetadata/v1/",               # 169.254.169.254, the metadata server (decimal)
    "https://0xa9.0xfe.0xa9.0xfe/computeMetadata/v1/",      # 169.254.169.254 (hex octets)
    "https://localhost/hook",
    "https://metadata.google.internal/computeMetadata/v1/",
])
def test_a_webhook_url_naming_a_loopback_or_metadata_host_is_refused(url):
    host = url.split("/")[2]
    resolved = socket.getaddrinfo(host, 443)[0][4][0] if host[0].isdigit() else None
    assert resolved in (None, "127.0.0.1", "169.254.169.254")  # what the POST would reach
    assert url_problem(url) is not None, f"{url} ({resolved or 'a name'}) is accepted as a notification URL"


# -- 2. One target answering a malformed HTTP response blocked every other target of the event, for good -------
class GarbageServer:
    """Accepts a connection, reads the request, answers bytes that are not HTTP (a misconfigured proxy,
    a port that speaks another protocol), closes."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.hits = 0
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/hook"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                self.hits += 1
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        self._sock.close()


def test_a_target_answering_garbage_does_not_block_the_other_targets(config, db, publisher, clock, db_url,
                                                                       monkeypatch):
    from zen_dev.local.invoke import FunctionsInvoker

    cfg = notifying_config(config)
    bad, good = (f"{secret(cfg, name)}/versions/latest" for name in ("zen-notify-bad", "zen-notify-good"))
    garbage = GarbageServer()
    with WebhookSink() as sink:
        urls = {bad: garbage.url, good: sink.url("good")}
        zen = Zen(cfg, db, publisher, clock,
                  notifier=Notifier(cfg, PostgresNotifications(db), urls.__getitem__, HttpPoster(), clock))
        monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
        functions = FunctionsInvoker(zen)
        functions.submit(job_request("gb-1", notify=[{"webhook": bad}, {"webhook": good}]))
        for beat in agent_run("gb-1", final="FAILED", exit_code=3):
            functions.heartbeat(beat)
        [final] = [m for m in publisher.on("zen-job-events") if json.loads(m.data).get("to_status") == "FAILED"]

        codes = [functions.send("on_job_event", final.data, attributes=final.attributes, message_id="ev-1").status_code
                 for _ in range(5)]  # Pub/Sub redelivers it, up to max_delivery_attempts, then dead-letters it
        garbage.close()

        with db.transaction() as session:
            rows = {r["target"]: (r["state"], r["tries"], r["detail"]) for r in notifications.of_job(session, "gb-1")}
        assert garbage.hits == 5 and set(codes) == {500}
        assert sink.on("good"), f"the good target was never tried in 5 deliveries; ledger {rows}"
        assert [row for row in rows.values() if row[0] == "failed"] == [("failed", 5, "its answer was not HTTP")], rows


# -- 3. Malformed zen-job-events messages crashed the notifier (500 until the dead letter) ---------------------
# on_job_event promises: an event that cannot be read is logged and acked.
@pytest.mark.parametrize("payload", [
    json.dumps({"type": "job.preempted", "at": "2026-01-01T00:00:00Z"}).encode(),  # was a KeyError: 'job_id'
    b"[" * 100_000,  # was a RecursionError from json.loads
    json.dumps({"type": "job.status_changed", "job_id": "a\x00b", "to_status": "FAILED"}).encode(),  # DataRejected
], ids=["preempted-without-job_id", "nested-too-deep", "nul-in-job_id"])
def test_an_unreadable_job_event_is_acked_not_retried(functions, payload):
    assert functions.send("on_job_event", payload, message_id="odd-1").status_code == 200


# -- 4. A bad envelope on zen-heartbeats / zen-job-stop was announced as a refused *submission* -----------------
# Zen._with_envelope passed "job.rejected" for every function; the reference says job.rejected is "a
# submission refused" and job.message_ignored "a heartbeat or stop that changed nothing".
@pytest.mark.parametrize("target", ["on_heartbeat", "on_stop_requested"])
def test_a_bad_envelope_on_a_heartbeat_or_stop_is_announced_as_message_ignored(functions, zen, publisher, target):
    event = {"specversion": "1.0", "id": "e1", "source": "//pubsub.googleapis.com/x",
             "type": "google.cloud.pubsub.topic.v1.messagePublished", "datacontenttype": "application/json",
             "data": {"message": {"data": "!!!not base64!!!", "messageId": "e1"}}}
    assert functions.post(target, event).status_code == 200
    with zen.db.transaction() as session:
        [row] = repository.list_rejections(session)
    assert row["reason"] == "message.data is not valid base64"
    [announced] = [json.loads(m.data) for m in publisher.on("zen-job-events")]
    assert announced["type"] == "job.message_ignored", announced
def test_the_webhook_connects_to_the_address_it_checked(monkeypatch):
    """A check that resolved the URL's host, then a connection that resolved it again, connected to whatever
    the second answer was: a name answering a public address to the check and a private one (TTL 0) to the
    connection got a TCP connection into the VPC. The address checked is the address connected to."""
    import socket
    import threading

    from zen.adapters import webhooks
    from zen.core.notify import DeliveryFailed, DeliveryRefused

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(1.5)
    port = listener.getsockname()[1]
    accepted = []

    def accept():
        try:
            conn, _ = listener.accept()
            accepted.append(conn)
            conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    real, answers = socket.getaddrinfo, []

    def getaddrinfo(host, port_, *args, **kwargs):
        if host != "rebind.example":
            return real(host, port_, *args, **kwargs)
        answers.append(host)
        address = "93.184.216.34" if len(answers) == 1 else "127.0.0.1"  # public to the check, then loopback
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port_))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    try:
        webhooks.HttpPoster().post(f"https://rebind.example:{port}/hook", {"x": 1}, {}, 1.0)
    except (DeliveryFailed, DeliveryRefused):
        pass
    thread.join(2)
    listener.close()
    assert not accepted, (f"the host was resolved {len(answers)} times: checked as public, then connected to "
                          f"127.0.0.1:{port}")


def test_an_operators_email_api_on_a_private_relay_is_not_refused_for_good(monkeypatch):
    """The operator's ``notifications.email.api_url`` (configuration, not a user's secret) may be a relay in the
    VPC: Zen's email poster does not hold it to public addresses (the webhooks' poster does)."""
    import socket

    from zen.adapters import webhooks
    from zen.core.notify import DeliveryFailed, DeliveryRefused

    resolving(monkeypatch, "mail-relay.corp.example", "10.20.0.5")
    monkeypatch.setattr(socket, "create_connection", lambda *a, **kw: (_ for _ in ()).throw(ConnectionRefusedError()))
    try:
        webhooks.HttpPoster(public_only=False).post("https://mail-relay.corp.example/v3/mail/send", {}, {}, 1.0)
    except DeliveryFailed:
        pass  # tried, as before: retried with the event
    except DeliveryRefused as refused:
        pytest.fail(f"the operator's configured email API was refused for good: {refused}")


@pytest.mark.parametrize("api_url", ["api.sendgrid.com/v3/mail/send", "htps://api.sendgrid.com/v3/mail/send",
                                     "https:///v3/mail/send", "https://api.sendgrid.com:mail/v3"])
def test_an_email_api_url_no_request_can_use_is_refused_when_the_configuration_loads(config, api_url):
    """It loaded, and every email notice then failed at delivery and was retried to the dead letter, saying "no
    answer" (or, without a scheme, "the notifier failed while sending")."""
    from zen.core.config import ZenConfig
    from zen.core.errors import ConfigError

    email = {"api_url": api_url, "api_key_secret": f"{secret(config, 'zen-notify-sendgrid')}/versions/latest",
             "sender": "zen@example.com", "recipients": ["*@example.com"]}
    with pytest.raises((ConfigError, ValueError), match=r"(?s)api_url.*give an http"):
        ZenConfig.model_validate({**config.model_dump(), "notifications": {"email": email}})
    with pytest.raises(DeliveryRefused, match="malformed"):  # a poster given one all the same refuses it once
        HttpPoster(public_only=False).post("api.sendgrid.com/v3/mail/send", {}, {}, 1.0)


def test_a_webhook_url_with_an_unusable_port_is_refused_not_retried_forever():
    """url_problem read ``hostname`` only: a port out of range or not a number failed at the POST, recorded
    ``failed`` and retried on every delivery until the dead letter, instead of being refused once."""
    from zen.core.notify import url_problem

    assert url_problem("https://hooks.example.com:99999/x") is not None
    assert url_problem("https://hooks.example.com:abc/x") is not None


def failed_notice(cfg, db, publisher, clock, notifier, job_id: str, ref: str) -> PubSubEnvelope:
    """``job_id`` submitted with a webhook (``ref``) told of its FAILED, run to FAILED through the functions:
    the event as the notifier (``notifier``) receives it from Pub/Sub."""
    from zen_dev.local.invoke import FunctionsInvoker

    functions = FunctionsInvoker(Zen(cfg, db, publisher, clock, notifier=notifier))
    functions.submit(job_request(job_id, notify=[{"webhook": ref, "on": ["FAILED"]}]))
    for beat in agent_run(job_id, final="FAILED", exit_code=3):
        functions.heartbeat(beat)
    [final] = [m for m in publisher.on("zen-job-events") if json.loads(m.data).get("to_status") == "FAILED"]
    return PubSubEnvelope(message_id="ev-1", data=final.data, attributes=final.attributes)


@pytest.mark.parametrize("url", [
    "https://hooks.example.com/services/T000 B000/XXXX",  # a space pasted into the path
    "https://hooks.exa mple.com/services/T000/B000/XXXX",  # a space in the host
    "https://hooks.example.com/services/caf\u00e9",  # a non-ASCII path
    "https://hooks..example.com/services/T000",  # an empty DNS label
], ids=["space-in-path", "space-in-host", "non-ascii-path", "empty-label"])
def test_a_url_no_request_can_carry_is_refused_once_not_retried(config, db, publisher, clock, db_url, monkeypatch, url):
    """These passed url_problem and failed inside urllib before any connection: recorded "failed" ("its answer
    was not HTTP", sending the user to look at a server) and answered 500 at every delivery of the event until
    the dead letter. Now refused once, the event acked, the reason naming what is wrong with the secret's value."""
    from zen.core.errors import TransientError

    cfg = notifying_config(config)
    ref = f"{secret(cfg, 'zen-notify-hook')}/versions/latest"
    notifier = Notifier(cfg, PostgresNotifications(db), {ref: url}.__getitem__, HttpPoster(), clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    envelope = failed_notice(cfg, db, publisher, clock, notifier, "bad-url", ref)
    for _ in range(2):  # a second delivery changes nothing
        try:
            notifier.handle(envelope)
        except TransientError:
            pytest.fail("a URL no request can carry was taken for a transient failure")
    with db.transaction() as session:
        [(state, detail)] = [(r["state"], r["detail"]) for r in notifications.of_job(session, "bad-url")]
    assert state == "refused" and ("space" in detail or "not a usable URL" in detail), detail


# -- A slow endpoint held one POST past notifications.timeout_s, and its late outcome undid a later "sent" -------
class Dribbler:
    """Answers a byte every 0.2 s, each within the POST's timeout: its status line and headers
    (``head=True``), or a 200 whose 30-byte body then dribbles."""

    def __init__(self, head: bool) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(4)
        self._answer = b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n"
        self._slowly = self._answer if head else b"x" * 30
        threading.Thread(target=self._serve, args=(head,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/hook"

    def _serve(self, head: bool) -> None:
        try:
            conn, _ = self._sock.accept()
        except OSError:
            return
        with conn:
            try:
                conn.recv(65536)
                if not head:
                    conn.sendall(self._answer)
                for byte in self._slowly:
                    time.sleep(0.2)
                    conn.sendall(bytes([byte]))
            except OSError:
                pass

    def close(self) -> None:
        self._sock.close()


@pytest.mark.parametrize("head", [True, False], ids=["headers dribble", "body dribbles"])
def test_one_post_takes_at_most_the_timeout_in_all(head):
    """urllib's timeout bounds each read: 30 bytes 0.2 s apart held a POST of timeout_s=1 for 6 s (the
    targets after it, and past the claim's hold). A status that came is the answer; none: no answer."""
    server = Dribbler(head)
    began = time.monotonic()
    try:
        if head:
            with pytest.raises(DeliveryFailed, match="no answer within 1 s"):
                HttpPoster().post(server.url, {"x": 1}, {}, 1.0)
        else:
            assert HttpPoster().post(server.url, {"x": 1}, {}, 1.0) == 200
        assert time.monotonic() - began < 2.0
    finally:
        server.close()


def test_a_delivery_that_outlived_its_claim_does_not_undo_the_later_ones_sent(config, db, publisher, clock,
                                                                                db_url, monkeypatch):
    """Delivery A's POST outlived its claim's hold; Pub/Sub's redelivery B took the claim, sent, recorded
    "sent"; A then failed and wrote "failed" over it, and A's 500 brought a third delivery that sent again."""
    cfg = notifying_config(config)
    ref = f"{secret(cfg, 'zen-notify-hook')}/versions/latest"
    posts: list[str] = []
    late: dict = {}

    class SlowThenOk:
        def post(self, url, body, headers, timeout_s):
            posts.append(headers["Zen-Delivery"])
            if len(posts) == 1:  # A: past its hold (2 x timeout_s + 30 s), B comes meanwhile and sends
                clock.advance(2 * timeout_s + 31)
                late["b"] = late["notifier"].handle(late["event"])
                raise DeliveryFailed(f"no answer within {timeout_s:g} s")
            return 200

    notifier = Notifier(cfg, PostgresNotifications(db), {ref: "https://hooks.example.com/x"}.__getitem__,
                        SlowThenOk(), clock)
    late["notifier"] = notifier
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    late["event"] = failed_notice(cfg, db, publisher, clock, notifier, "ov-1", ref)

    notifier.handle(late["event"])  # A: B's outcome stands, so A has nothing to retry
    assert late["b"].sent
    clock.advance(20)
    assert notifier.handle(late["event"]).skipped  # any later delivery finds it sent
    with db.transaction() as session:
        rows = [(r["state"], r["tries"], r["detail"]) for r in notifications.of_job(session, "ov-1")]
    assert len(posts) == 2 and rows == [("sent", 2, "HTTP 200")], (posts, rows)
