"""A heartbeat's proof of its sender (``zen.vm_proof``): the VM's identity token, checked against the
issuer's certificates, the audience, its lifetime, and the VM, zone and project the heartbeat names."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from zen.clock import ManualClock
from zen.errors import ConfigError, Rejected, TransientError
from zen.local.compute.issuer import TokenIssuer
from zen.vm_proof import ATTRIBUTE, ProofChecker, audience, fetch_certs, joined_token, token_attributes

PROJECT = "zen-proof"
VM, ZONE = "vm-a", "us-central1-a"


@pytest.fixture(scope="module")
def issuer():
    return TokenIssuer()


@pytest.fixture
def clock():
    return ManualClock()


class Certs:
    """An injected fetcher that counts its calls."""

    def __init__(self, *issuers: TokenIssuer, max_age_s: float = 3600):
        self.certs = {k: v for i in issuers for k, v in i.certs().items()}
        self.max_age_s = max_age_s
        self.calls = 0

    def __call__(self, url):
        self.calls += 1
        return dict(self.certs), self.max_age_s


def make_checker(clock, fetch, mode="required", monotonic=None):
    extra = {"monotonic": monotonic} if monotonic else {}
    return ProofChecker(mode, "http://certs.invalid/", audience(PROJECT), clock, fetch=fetch, **extra)


def token(issuer, clock, vm=VM, zone=ZONE, project=PROJECT, **overrides):
    return issuer.token(vm=vm, zone=zone, project=project, audience=audience(PROJECT),
                        now=clock().timestamp(), **overrides)


def test_a_valid_token_naming_the_vm_is_accepted_and_verified_once(issuer, clock):
    certs = Certs(issuer)
    checker = make_checker(clock, certs)
    proof = token(issuer, clock)
    checker.check({ATTRIBUTE: proof}, VM, ZONE, PROJECT)
    clock.advance(50 * 60)  # the same token, for most of its hour: a dictionary lookup
    for _ in range(5):
        checker.check({ATTRIBUTE: proof}, VM, ZONE, PROJECT)
    assert checker.verifications == 1 and certs.calls == 1


@pytest.mark.parametrize("named, reason", [
    ({"vm": "vm-b"}, "names VM 'vm-b' but its vm_proof token is for VM 'vm-a'"),
    ({"zone": "us-central1-b"}, "names zone 'us-central1-b' but its vm_proof token is for zone 'us-central1-a'"),
    ({"project": "other"}, "names project 'other' but its vm_proof token is for project 'zen-proof'"),
])
def test_a_token_of_another_vm_zone_or_project_is_rejected(issuer, clock, named, reason):
    checker = make_checker(clock, Certs(issuer))
    args = {"vm": VM, "zone": ZONE, "project": PROJECT, **named}
    with pytest.raises(Rejected, match=reason):
        checker.check({ATTRIBUTE: token(issuer, clock)}, args["vm"], args["zone"], args["project"])


def test_an_expired_token_is_rejected_even_once_remembered(issuer, clock):
    checker = make_checker(clock, Certs(issuer))
    old = issuer.token(vm=VM, zone=ZONE, project=PROJECT, audience=audience(PROJECT),
                       now=(clock() - timedelta(hours=2)).timestamp())
    with pytest.raises(Rejected, match="vm_proof token expired"):
        checker.check({ATTRIBUTE: old}, VM, ZONE, PROJECT)
    fresh = token(issuer, clock)
    checker.check({ATTRIBUTE: fresh}, VM, ZONE, PROJECT)
    clock.advance(2 * 3600)
    with pytest.raises(Rejected, match="expired"):
        checker.check({ATTRIBUTE: fresh}, VM, ZONE, PROJECT)


def test_a_token_for_another_audience_is_rejected(issuer, clock):
    checker = make_checker(clock, Certs(issuer))
    other = issuer.token(vm=VM, zone=ZONE, project=PROJECT, audience="https://example.com",
                         now=clock().timestamp())
    with pytest.raises(Rejected, match="for audience 'https://example.com', not 'zen-heartbeats:zen-proof'"):
        checker.check({ATTRIBUTE: other}, VM, ZONE, PROJECT)


def test_a_token_not_from_google_is_rejected(issuer, clock):
    checker = make_checker(clock, Certs(issuer))
    with pytest.raises(Rejected, match="issuer 'https://evil.example' is not Google's"):
        checker.check({ATTRIBUTE: token(issuer, clock, iss="https://evil.example")}, VM, ZONE, PROJECT)


def test_a_bad_signature_or_an_unknown_key_is_rejected(issuer, clock):
    checker = make_checker(clock, Certs(issuer))
    header, claims, signature = token(issuer, clock).split(".")
    forged_claims = token(issuer, clock, vm="vm-b").split(".")[1]  # vm-b's claims under vm-a's signature
    with pytest.raises(Rejected, match="signature does not verify"):
        checker.check({ATTRIBUTE: f"{header}.{forged_claims}.{signature}"}, "vm-b", ZONE, PROJECT)
    stranger = TokenIssuer()  # a key the certificates do not list, fetched for this very check
    with pytest.raises(Rejected, match="which http://certs.invalid/ does not list"):
        make_checker(clock, Certs(issuer)).check({ATTRIBUTE: token(stranger, clock)}, VM, ZONE, PROJECT)
    with pytest.raises(Rejected, match="not a JWT"):
        checker.check({ATTRIBUTE: "garbage"}, VM, ZONE, PROJECT)


def test_required_mode_rejects_a_heartbeat_without_a_token(clock):
    checker = make_checker(clock, Certs())
    with pytest.raises(Rejected, match="carries no vm_proof attribute .*upgrade the VM's agent"):
        checker.check({"kind": "job", "vm": VM}, VM, ZONE, PROJECT)


def test_off_mode_checks_nothing(issuer, clock):
    certs = Certs(issuer)
    checker = make_checker(clock, certs, mode="off")
    checker.check({}, VM, ZONE, PROJECT)
    checker.check({ATTRIBUTE: "garbage"}, VM, ZONE, PROJECT)
    checker.check({ATTRIBUTE: token(issuer, clock, vm="vm-b")}, VM, ZONE, PROJECT)
    assert certs.calls == 0


def test_the_mode_comes_from_the_environment_and_defaults_to_off(clock):
    assert ProofChecker.from_env(PROJECT, clock, {}).mode == "off"
    assert ProofChecker.from_env(PROJECT, clock, {"ZEN_VM_PROOF": "required"}).mode == "required"
    with pytest.raises(ConfigError, match="ZEN_VM_PROOF='maybe'"):
        ProofChecker.from_env(PROJECT, clock, {"ZEN_VM_PROOF": "maybe"})


def test_an_unknown_key_refetches_the_certificates_at_most_once_a_minute(issuer, clock):
    certs = Certs(issuer)
    moment = [0.0]
    checker = make_checker(clock, certs, monotonic=lambda: moment[0])
    checker.check({ATTRIBUTE: token(issuer, clock)}, VM, ZONE, PROJECT)
    rotated = TokenIssuer()  # Google rotates its keys: a token signed by the new one
    moment[0] = 61.0
    with pytest.raises(Rejected, match="does not list"):  # refetched for it, and still unknown
        checker.check({ATTRIBUTE: token(rotated, clock)}, VM, ZONE, PROJECT)
    for _ in range(2):  # not refetched within the pause: a fetch that recent lists every key in use
        with pytest.raises(Rejected, match="does not list"):
            checker.check({ATTRIBUTE: token(rotated, clock)}, VM, ZONE, PROJECT)
    assert certs.calls == 2  # one refetch for the unknown key, not one per message
    certs.certs.update(rotated.certs())  # Google lists the new key
    moment[0] = 122.0
    checker.check({ATTRIBUTE: token(rotated, clock)}, VM, ZONE, PROJECT)
    assert certs.calls == 3


def test_an_unknown_key_with_a_forged_future_iat_is_refused_not_retried(issuer, clock):
    """The retry was decided on the token's own, unverified iat: a forger setting it in the future
    earned a 5xx on every delivery within a minute of a fetch (then the dead letters, nothing recorded)."""
    checker = make_checker(clock, Certs(issuer))
    checker.check({ATTRIBUTE: token(issuer, clock)}, VM, ZONE, PROJECT)  # the certificates fetched now
    forged = token(TokenIssuer(), clock, iat=4_000_000_000)
    for _ in range(3):
        with pytest.raises(Rejected, match="does not list"):
            checker.check({ATTRIBUTE: forged}, VM, ZONE, PROJECT)


def test_a_publish_time_without_a_zone_is_not_trusted(issuer, clock):
    """Pub/Sub's publishTime is UTC with a Z; a bare one (year 1: ``timestamp()`` raised ValueError, a
    500) is ignored, and the token judged by Zen's clock."""
    from datetime import datetime

    from zen.events import envelope_from_cloud_event

    checker = make_checker(clock, Certs(issuer))
    checker.check({ATTRIBUTE: token(issuer, clock)}, VM, ZONE, PROJECT, datetime(1, 1, 1))  # no ValueError
    published = "google.cloud.pubsub.topic.v1.messagePublished"
    envelope = envelope_from_cloud_event("e1", published, {"message": {"data": "e30=", "messageId": "1",
                                                                       "publishTime": "0001-01-01T00:00:00"}})
    assert envelope.publish_time is None


class _CertsServer:
    def __init__(self, body: bytes, cache_control: str):
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                served.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Cache-Control", cache_control)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/v1/certs"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_certificates_are_fetched_over_http_and_kept_for_their_max_age(issuer, clock):
    server = _CertsServer(json.dumps(issuer.certs()).encode(), "public, max-age=120, must-revalidate")
    try:
        assert fetch_certs(server.url) == (issuer.certs(), 120.0)
        moment = [0.0]
        checker = ProofChecker("required", server.url, audience(PROJECT), clock, monotonic=lambda: moment[0])
        checker.check({ATTRIBUTE: token(issuer, clock)}, VM, ZONE, PROJECT)
        checker.check({ATTRIBUTE: token(issuer, clock, sub="another")}, VM, ZONE, PROJECT)
        assert server.requests == 2  # the direct fetch, then the checker's one
        moment[0] = 121.0
        checker.check({ATTRIBUTE: token(issuer, clock, sub="a third")}, VM, ZONE, PROJECT)
        assert server.requests == 3  # past max-age: fetched again
    finally:
        server.close()
    with pytest.raises(TransientError, match="cannot fetch the certificates"):
        ProofChecker("required", server.url, audience(PROJECT), clock).check(
            {ATTRIBUTE: token(issuer, clock)}, VM, ZONE, PROJECT)


def test_a_token_too_long_for_one_attribute_goes_in_pieces(issuer, clock):
    """Pub/Sub refuses an attribute value over 1,024 bytes; a GCE token (with the account's e-mail and
    numeric ids, as the stand-in's) is longer: it goes as vm_proof, vm_proof_1, ..."""
    proof = token(issuer, clock, vm="zen-4xa100-40gb-europe-west4-abcd", zone="europe-west4-a")
    assert len(proof) > 1024
    pieces = token_attributes(proof)
    assert len(pieces) >= 2 and all(len(v.encode()) <= 1024 for v in pieces.values())
    assert joined_token({**pieces, "kind": "job"}) == proof
    make_checker(clock, Certs(issuer)).check(pieces, "zen-4xa100-40gb-europe-west4-abcd", "europe-west4-a", PROJECT)


def test_a_token_valid_when_the_message_was_published_is_accepted_when_delivered_late(issuer, clock):
    """A heartbeat held back by an outage of Zen's (Pub/Sub redelivering) keeps its proof: the token
    is judged at the message's publish time, which Pub/Sub sets."""
    published = clock()
    proof = token(issuer, clock)
    clock.advance(3 * 3600)  # delivered three hours later, long after the token expired
    checker = make_checker(clock, Certs(issuer))
    checker.check({ATTRIBUTE: proof}, VM, ZONE, PROJECT, published)
    with pytest.raises(Rejected, match="expired"):  # published now, with an old token: a replay
        checker.check({ATTRIBUTE: proof}, VM, ZONE, PROJECT, clock())


def test_an_unknown_key_on_a_token_older_than_the_certificates_is_refused_at_once(issuer, clock):
    """A token issued before the last fetch was signed by a key that fetch would have listed: refused,
    not retried (a 5xx on every delivery would dead-letter it)."""
    checker = make_checker(clock, Certs(issuer))
    checker.check({ATTRIBUTE: token(issuer, clock)}, VM, ZONE, PROJECT)  # the certificates fetched now
    old = token(TokenIssuer(), clock, iat=int(clock().timestamp()) - 600)
    with pytest.raises(Rejected, match="does not list"):
        checker.check({ATTRIBUTE: old}, VM, ZONE, PROJECT)
