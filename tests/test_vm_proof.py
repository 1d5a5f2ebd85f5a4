"""A heartbeat's proof of its sender (``zen.adapters.vm_proof``): the VM's identity token, checked against the
issuer's certificates, the audience, its lifetime, and the VM, zone and project the heartbeat names;
and the signature of the very message by the key the token's audience binds."""

from __future__ import annotations

import functools
import json
from datetime import timedelta

import pytest

from tests.token_support import CertsServer
from zen.core.clock import ManualClock
from zen.core.errors import ConfigError, Rejected, TransientError
from zen_dev.local.compute.issuer import TokenIssuer
from zen.adapters.message_key import (
    ATTRIBUTE, KEY_ATTRIBUTE, SIGNATURE_ATTRIBUTE, MessageKey, audience, joined_token, token_attributes,
)
from zen.adapters.vm_proof import ProofChecker, fetch_certs

PROJECT = "zen-proof"
VM, ZONE = "vm-a", "us-central1-a"
BODY = b'{"job_id": "job-1", "status": "RUNNING", "seq": 2}'  # what the VM signed (the checker reads no field of it)
KEY = functools.cache(MessageKey)  # the agent's message key: one for the module, made at its first use (RSA: 0.15 s)


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


def token(issuer, clock, vm=VM, zone=ZONE, project=PROJECT, key=None, **overrides):
    """The VM's token for Zen's audience, bound to ``key`` (the agent's message key)."""
    key = key or KEY()
    return issuer.token(vm=vm, zone=zone, project=project, audience=audience(PROJECT, key.fingerprint),
                        now=clock().timestamp(), **overrides)


def proven(proof: str, data: bytes = BODY, key=None, **attributes) -> dict[str, str]:
    """What the agent publishes: its own ``attributes``, then the token, the key and its signature."""
    key = key or KEY()
    return {**attributes, **key.attributes(proof, data, attributes)}


def test_a_valid_token_naming_the_vm_is_accepted_and_verified_once(issuer, clock):
    certs = Certs(issuer)
    checker = make_checker(clock, certs)
    proof = token(issuer, clock)
    checker.check(proven(proof), VM, ZONE, PROJECT, data=BODY)
    clock.advance(50 * 60)  # the same token, for most of its hour: a dictionary lookup
    for _ in range(5):
        checker.check(proven(proof), VM, ZONE, PROJECT, data=BODY)
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
        checker.check(proven(token(issuer, clock)), args["vm"], args["zone"], args["project"], data=BODY)


def test_an_expired_token_is_rejected_even_once_remembered(issuer, clock):
    checker = make_checker(clock, Certs(issuer))
    old = issuer.token(vm=VM, zone=ZONE, project=PROJECT, audience=audience(PROJECT, KEY().fingerprint),
                       now=(clock() - timedelta(hours=2)).timestamp())
    with pytest.raises(Rejected, match="vm_proof token expired"):
        checker.check(proven(old), VM, ZONE, PROJECT, data=BODY)
    fresh = token(issuer, clock)
    checker.check(proven(fresh), VM, ZONE, PROJECT, data=BODY)
    clock.advance(2 * 3600)
    with pytest.raises(Rejected, match="expired"):
        checker.check(proven(fresh), VM, ZONE, PROJECT, data=BODY)


def test_a_token_for_another_audience_is_rejected(issuer, clock):
    checker = make_checker(clock, Certs(issuer))
    other = issuer.token(vm=VM, zone=ZONE, project=PROJECT, audience="https://example.com",
                         now=clock().timestamp())
    with pytest.raises(Rejected, match="for audience 'https://example.com', not zen-heartbeats:zen-proof:key:<key>"):
        checker.check(proven(other), VM, ZONE, PROJECT, data=BODY)


def test_a_token_not_from_google_is_rejected(issuer, clock):
    checker = make_checker(clock, Certs(issuer))
    with pytest.raises(Rejected, match="issuer 'https://evil.example' is not Google's"):
        checker.check(proven(token(issuer, clock, iss="https://evil.example")), VM, ZONE, PROJECT, data=BODY)


def test_a_bad_signature_or_an_unknown_key_is_rejected(issuer, clock):
    checker = make_checker(clock, Certs(issuer))
    header, claims, signature = token(issuer, clock).split(".")
    forged_claims = token(issuer, clock, vm="vm-b").split(".")[1]  # vm-b's claims under vm-a's signature
    with pytest.raises(Rejected, match="signature does not verify"):
        checker.check(proven(f"{header}.{forged_claims}.{signature}"), "vm-b", ZONE, PROJECT, data=BODY)
    stranger = TokenIssuer()  # a key the certificates do not list, fetched for this very check
    with pytest.raises(Rejected, match="which http://certs.invalid/ does not list"):
        make_checker(clock, Certs(issuer)).check(proven(token(stranger, clock)), VM, ZONE, PROJECT, data=BODY)
    with pytest.raises(Rejected, match="not a JWT"):
        checker.check(proven("garbage"), VM, ZONE, PROJECT, data=BODY)


def test_required_mode_rejects_a_heartbeat_without_a_token(clock):
    checker = make_checker(clock, Certs())
    with pytest.raises(Rejected, match="carries no vm_proof attribute .*upgrade the VM's agent"):
        checker.check({"kind": "job", "vm": VM}, VM, ZONE, PROJECT, data=BODY)


def test_off_mode_checks_nothing(issuer, clock):
    certs = Certs(issuer)
    checker = make_checker(clock, certs, mode="off")
    checker.check({}, VM, ZONE, PROJECT, data=BODY)
    checker.check(proven("garbage"), VM, ZONE, PROJECT, data=BODY)
    checker.check(proven(token(issuer, clock, vm="vm-b")), VM, ZONE, PROJECT, data=BODY)
    assert certs.calls == 0


def test_the_mode_comes_from_the_environment_and_defaults_to_required(clock, caplog):
    """Fail closed: unset (or empty), heartbeats must prove their VM (it was off: a deployment that
    forgot the variable believed any heartbeat); off is a choice, said loudly at start."""
    for unset in ({}, {"ZEN_VM_PROOF": ""}):
        assert ProofChecker.from_env(PROJECT, clock, unset).mode == "required"
    assert ProofChecker.from_env(PROJECT, clock, {"ZEN_VM_PROOF": "required"}).mode == "required"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert ProofChecker.from_env(PROJECT, clock, {"ZEN_VM_PROOF": "OFF"}).mode == "off"
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "ZEN_VM_PROOF=off: heartbeats are believed without proof" in warning.getMessage()
    with pytest.raises(ConfigError, match="ZEN_VM_PROOF='maybe'"):
        ProofChecker.from_env(PROJECT, clock, {"ZEN_VM_PROOF": "maybe"})


def test_an_unknown_key_refetches_the_certificates_at_most_once_a_minute(issuer, clock):
    certs = Certs(issuer)
    moment = [0.0]
    checker = make_checker(clock, certs, monotonic=lambda: moment[0])
    checker.check(proven(token(issuer, clock)), VM, ZONE, PROJECT, data=BODY)
    rotated = TokenIssuer()  # Google rotates its keys: a token signed by the new one
    moment[0] = 61.0
    with pytest.raises(Rejected, match="does not list"):  # refetched for it, and still unknown
        checker.check(proven(token(rotated, clock)), VM, ZONE, PROJECT, data=BODY)
    for _ in range(2):  # not refetched within the pause: a fetch that recent lists every key in use
        with pytest.raises(Rejected, match="does not list"):
            checker.check(proven(token(rotated, clock)), VM, ZONE, PROJECT, data=BODY)
    assert certs.calls == 2  # one refetch for the unknown key, not one per message
    certs.certs.update(rotated.certs())  # Google lists the new key
    moment[0] = 122.0
    checker.check(proven(token(rotated, clock)), VM, ZONE, PROJECT, data=BODY)
    assert certs.calls == 3


def test_an_unknown_key_with_a_forged_future_iat_is_refused_not_retried(issuer, clock):
    """The retry was decided on the token's own, unverified iat: a forger setting it in the future
    earned a 5xx on every delivery within a minute of a fetch (then the dead letters, nothing recorded)."""
    checker = make_checker(clock, Certs(issuer))
    checker.check(proven(token(issuer, clock)), VM, ZONE, PROJECT, data=BODY)  # the certificates fetched now
    forged = token(TokenIssuer(), clock, iat=4_000_000_000)
    for _ in range(3):
        with pytest.raises(Rejected, match="does not list"):
            checker.check(proven(forged), VM, ZONE, PROJECT, data=BODY)


def test_a_publish_time_without_a_zone_is_not_trusted(issuer, clock):
    """Pub/Sub's publishTime is UTC with a Z; a bare one (year 1: ``timestamp()`` raised ValueError, a
    500) is ignored, and the token judged by Zen's clock."""
    from datetime import datetime

    from zen.core.events import envelope_from_cloud_event

    checker = make_checker(clock, Certs(issuer))
    checker.check(proven(token(issuer, clock)), VM, ZONE, PROJECT, datetime(1, 1, 1), data=BODY)  # no ValueError
    published = "google.cloud.pubsub.topic.v1.messagePublished"
    envelope = envelope_from_cloud_event("e1", published, {"message": {"data": "e30=", "messageId": "1",
                                                                       "publishTime": "0001-01-01T00:00:00"}})
    assert envelope.publish_time is None


def test_certificates_are_fetched_over_http_and_kept_for_their_max_age(issuer, clock):
    server = CertsServer(json.dumps(issuer.certs()).encode(), "public, max-age=120, must-revalidate")
    try:
        assert fetch_certs(server.url) == (issuer.certs(), 120.0)
        moment = [0.0]
        checker = ProofChecker("required", server.url, audience(PROJECT), clock, monotonic=lambda: moment[0])
        checker.check(proven(token(issuer, clock)), VM, ZONE, PROJECT, data=BODY)
        checker.check(proven(token(issuer, clock, sub="another")), VM, ZONE, PROJECT, data=BODY)
        assert server.requests == 2  # the direct fetch, then the checker's one
        moment[0] = 121.0
        checker.check(proven(token(issuer, clock, sub="a third")), VM, ZONE, PROJECT, data=BODY)
        assert server.requests == 3  # past max-age: fetched again
    finally:
        server.close()
    with pytest.raises(TransientError, match="cannot fetch the certificates"):
        ProofChecker("required", server.url, audience(PROJECT), clock).check(
            {ATTRIBUTE: token(issuer, clock)}, VM, ZONE, PROJECT, data=BODY)


def test_a_token_too_long_for_one_attribute_goes_in_pieces(issuer, clock):
    """Pub/Sub refuses an attribute value over 1,024 bytes; a GCE token (with the account's e-mail and
    numeric ids, as the stand-in's) is longer: it goes as vm_proof, vm_proof_1, ..."""
    proof = token(issuer, clock, vm="zen-4xa100-40gb-europe-west4-abcd", zone="europe-west4-a")
    assert len(proof) > 1024
    pieces = token_attributes(proof)
    assert len(pieces) >= 2 and all(len(v.encode()) <= 1024 for v in pieces.values())
    assert joined_token({**pieces, "kind": "job"}) == proof
    sent = proven(proof, kind="job")
    assert all(len(v.encode()) <= 1024 for v in sent.values())  # the key and the signature fit an attribute each
    make_checker(clock, Certs(issuer)).check(sent, "zen-4xa100-40gb-europe-west4-abcd", "europe-west4-a", PROJECT,
                                             data=BODY)


def test_a_token_valid_when_the_message_was_published_is_accepted_when_delivered_late(issuer, clock):
    """A heartbeat held back by an outage of Zen's (Pub/Sub redelivering) keeps its proof: the token
    is judged at the message's publish time, which Pub/Sub sets."""
    published = clock()
    proof = token(issuer, clock)
    clock.advance(3 * 3600)  # delivered three hours later, long after the token expired
    checker = make_checker(clock, Certs(issuer))
    checker.check(proven(proof), VM, ZONE, PROJECT, published, data=BODY)
    with pytest.raises(Rejected, match="expired"):  # published now, with an old token: a replay
        checker.check(proven(proof), VM, ZONE, PROJECT, clock(), data=BODY)


def test_an_unknown_key_on_a_token_older_than_the_certificates_is_refused_at_once(issuer, clock):
    """A token issued before the last fetch was signed by a key that fetch would have listed: refused,
    not retried (a 5xx on every delivery would dead-letter it)."""
    checker = make_checker(clock, Certs(issuer))
    checker.check(proven(token(issuer, clock)), VM, ZONE, PROJECT, data=BODY)  # the certificates fetched now
    old = token(TokenIssuer(), clock, iat=int(clock().timestamp()) - 600)
    with pytest.raises(Rejected, match="does not list"):
        checker.check(proven(old), VM, ZONE, PROJECT, data=BODY)


def test_a_token_copied_onto_another_message_is_rejected(issuer, clock):
    """The token alone was a bearer credential for its hour: copied from a heartbeat (the dead-letter
    subscription keeps them) onto a report of the attacker's own, it spoke for the VM. Now the message
    must be signed by the key the token binds, which never leaves the agent."""
    checker = make_checker(clock, Certs(issuer))
    sent = proven(token(issuer, clock), kind="job", vm=VM)
    checker.check(sent, VM, ZONE, PROJECT, data=BODY)  # the VM's own message
    forged_body = b'{"job_id": "job-1", "status": "SUCCEEDED", "seq": 3}'
    with pytest.raises(Rejected, match="vm_sig does not verify with the key its vm_proof token binds: its body "
                                       "or attributes are not what VM vm-a signed"):
        checker.check(sent, VM, ZONE, PROJECT, data=forged_body)  # the captured proof, another body
    with pytest.raises(Rejected, match="vm_sig does not verify"):  # the same body, other attributes
        checker.check({**sent, "kind": "vm"}, VM, ZONE, PROJECT, data=BODY)
    mine = MessageKey()  # the attacker's key, its own signature of its message, under the VM's token
    with pytest.raises(Rejected, match="vm_sig does not verify"):
        checker.check({**sent, **mine.attributes(joined_token(sent), forged_body, {"kind": "job", "vm": VM})},
                      VM, ZONE, PROJECT, data=forged_body)
    with pytest.raises(Rejected, match="vm_key is not the key its vm_proof token binds"):  # a checker not
        make_checker(clock, Certs(issuer)).check(  # remembering the token reads the key from the message
            {**sent, **mine.attributes(joined_token(sent), forged_body, {"kind": "job", "vm": VM})},
            VM, ZONE, PROJECT, data=forged_body)


def test_a_message_without_the_signature_or_key_is_rejected(issuer, clock):
    checker = make_checker(clock, Certs(issuer))
    sent = proven(token(issuer, clock))
    unsigned = {k: v for k, v in sent.items() if k != SIGNATURE_ATTRIBUTE}
    with pytest.raises(Rejected, match="carries no vm_sig attribute"):
        checker.check(unsigned, VM, ZONE, PROJECT, data=BODY)
    keyless = {k: v for k, v in sent.items() if k != KEY_ATTRIBUTE}
    with pytest.raises(Rejected, match="carries no usable vm_key attribute"):
        make_checker(clock, Certs(issuer)).check(keyless, VM, ZONE, PROJECT, data=BODY)
    with pytest.raises(Rejected, match="vm_key is not a public key"):
        make_checker(clock, Certs(issuer)).check({**sent, KEY_ATTRIBUTE: "bm90IGEga2V5"}, VM, ZONE, PROJECT,
                                                 data=BODY)
    with pytest.raises(Rejected, match="vm_sig does not verify"):
        checker.check({**sent, SIGNATURE_ATTRIBUTE: "!!"}, VM, ZONE, PROJECT, data=BODY)
    small = MessageKey(bits=1024)  # cheap to forge: a key's size and exponent are Zen's to choose
    with pytest.raises(Rejected, match="vm_key is not an RSA key of 2048 to 4096 bits with exponent 3 or 65537"):
        checker.check(proven(token(issuer, clock, key=small), key=small), VM, ZONE, PROJECT, data=BODY)


def test_a_token_binding_no_key_is_rejected_saying_the_agent_is_too_old(issuer, clock):
    """An agent older than signed heartbeats asks for the bare project audience: under required its
    token proves nothing about the message, so it is refused with what to do."""
    bare = issuer.token(vm=VM, zone=ZONE, project=PROJECT, audience=audience(PROJECT), now=clock().timestamp())
    with pytest.raises(Rejected, match="binds no message key: the agent predates signed heartbeats"):
        make_checker(clock, Certs(issuer)).check({ATTRIBUTE: bare, "kind": "job"}, VM, ZONE, PROJECT, data=BODY)


def test_what_the_key_signs_leaves_out_the_proof_and_google_attributes_only():
    from zen.adapters.message_key import signed_bytes

    base = signed_bytes(BODY, {"kind": "job", "vm": VM})
    assert signed_bytes(BODY, {"vm": VM, "kind": "job", ATTRIBUTE: "t", f"{ATTRIBUTE}_1": "u", KEY_ATTRIBUTE: "k",
                               SIGNATURE_ATTRIBUTE: "s", "googclient_traceparent": "x"}) == base
    assert signed_bytes(BODY, {"kind": "job", "vm": VM, "extra": ""}) != base
    assert signed_bytes(BODY + b" ", {"kind": "job", "vm": VM}) != base
