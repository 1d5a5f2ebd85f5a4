"""The agent's side of ``zen.adapters.vm_proof``: it fetches its VM's identity token from the metadata server
(for Zen's audience bound to the agent's own message key, ``format=full``), keeps it until shortly
before it expires, and attaches it to every heartbeat it publishes as the attribute ``vm_proof``,
with the key (``vm_key``) and the key's signature of that very heartbeat (``vm_sig``)."""

from __future__ import annotations

import functools
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from tests.agent.fakes import FakeMetadata
from zen.agent.identity import Identity, MetadataServer, ProofSource
from zen.agent.transport import PubSubTransport, TransportError
from zen.core.errors import Rejected
from zen.core.models import AgentStatus, Heartbeat
from zen_dev.local.compute.issuer import TokenIssuer
from zen.adapters.message_key import (
    IDENTITY_PATH, KEY_ATTRIBUTE, SIGNATURE_ATTRIBUTE, MessageKey, audience, joined_token, token_attributes,
)
from zen.adapters.vm_proof import ProofChecker, unverified_claims

PROJECT = "zen-agent-proof"
IDENTITY = Identity(project=PROJECT, vm="vm-a", cluster="4xa100-40gb", region="us-central1",
                    zone="us-central1-a", from_environment=True)
NOW = 1_800_000_000.0
KEY = functools.cache(MessageKey)  # the agent's message key, given to its ProofSource (made once, at its first use)


@pytest.fixture(scope="module")
def issuer():
    return TokenIssuer()


@pytest.fixture
def metadata(issuer):
    fake = FakeMetadata({IDENTITY_PATH: issuer.token(vm="vm-a", zone="us-central1-a", project=PROJECT,
                                                     audience=audience(PROJECT, KEY().fingerprint), now=NOW)})
    yield fake
    fake.close()


class _Done:
    def result(self, timeout=None):
        return "1"


class RecordingClients:
    """Publisher and subscriber stand-ins that record what is published."""

    def __init__(self):
        self.published: list[tuple[str, bytes, dict[str, str]]] = []

    def topic_path(self, project, topic):
        return f"projects/{project}/topics/{topic}"

    def subscription_path(self, project, subscription):
        return f"projects/{project}/subscriptions/{subscription}"

    def publish(self, topic, data, **attributes):
        self.published.append((topic, data, attributes))
        return _Done()

    def stop(self):
        pass

    close = stop


def beat(seq: int) -> Heartbeat:
    return Heartbeat(job_id="job-1", attempt=1, vm="vm-a", region="us-central1", zone="us-central1-a",
                     status=AgentStatus.RUNNING, seq=seq, sent_at=datetime.now(timezone.utc))


def test_every_heartbeat_carries_the_token_the_agent_fetched(config, metadata, issuer):
    clients = RecordingClients()
    source = ProofSource(MetadataServer(metadata.host), PROJECT, clock=lambda: NOW, key=KEY())
    transport = PubSubTransport(config, IDENTITY, publisher=clients, subscriber=clients, proof=source)
    transport.publish(beat(1), budget_s=5)
    transport.publish(beat(2), budget_s=5)
    tokens = [joined_token(attributes) for _, _, attributes in clients.published]
    assert all(len(value.encode()) <= 1024 for _, _, attributes in clients.published for value in attributes.values())
    assert tokens == [metadata.values[IDENTITY_PATH]] * 2
    assert clients.published[0][2]["vm"] == "vm-a" and clients.published[0][2]["kind"] == "job"
    # Asked once, for Zen's audience bound to the agent's key, and the VM's claims.
    assert metadata.requests == [f"/computeMetadata/v1/{IDENTITY_PATH}?audience=zen-heartbeats%3A{PROJECT}"
                                 f"%3Akey%3A{KEY().fingerprint}&format=full"]
    assert unverified_claims(tokens[0])["google"]["compute_engine"]["instance_name"] == "vm-a"
    # Each heartbeat is signed as published: Zen's checker takes it, and not its proof on the other's body.
    checker = ProofChecker("required", "http://certs.invalid/", audience(PROJECT),
                           lambda: datetime.fromtimestamp(NOW, timezone.utc), fetch=lambda _: (issuer.certs(), 3600))
    (_, first, sent), (_, second, _) = clients.published
    assert sent[KEY_ATTRIBUTE] == KEY().public and sent[SIGNATURE_ATTRIBUTE]
    checker.check(sent, "vm-a", "us-central1-a", PROJECT, data=first)
    with pytest.raises(Rejected, match="vm_sig does not verify"):
        checker.check(sent, "vm-a", "us-central1-a", PROJECT, data=second)


def test_the_token_is_refreshed_five_minutes_before_it_expires(metadata):
    now = [NOW]
    source = ProofSource(MetadataServer(metadata.host), PROJECT, clock=lambda: now[0])
    first = source.token()
    now[0] = NOW + 3600 - 301
    assert source.token() == first and len(metadata.requests) == 1
    now[0] = NOW + 3600 - 299
    source.token()
    assert len(metadata.requests) == 2


def test_a_wall_clock_behind_does_not_keep_an_expired_token(config, metadata, issuer):
    """The token's expiry was judged on the VM's wall clock: 10 minutes behind, its heartbeats carried an expired
    token for 10 minutes. Pub/Sub took them (the attempt's lease renewed: its fence never fell) while Zen refused
    every one, took the attempt for lost after heartbeat_timeout_s and ran it again beside the job running here."""
    real, behind = [NOW], 600.0
    clients = RecordingClients()
    source = ProofSource(MetadataServer(metadata.host), PROJECT, clock=lambda: real[0] - behind, key=KEY())
    transport = PubSubTransport(config, IDENTITY, publisher=clients, subscriber=clients, proof=source)
    checker = ProofChecker("required", "http://certs.invalid/", audience(PROJECT),
                           lambda: datetime.fromtimestamp(real[0], timezone.utc), fetch=lambda _: (issuer.certs(), 3600))
    for seq, t in enumerate(range(0, 4200, 30), start=1):  # a heartbeat every 30 s past the first token's hour
        real[0] = NOW + t
        metadata.values[IDENTITY_PATH] = issuer.token(vm="vm-a", zone="us-central1-a", project=PROJECT,
                                                      audience=audience(PROJECT, KEY().fingerprint), now=real[0])
        transport.publish(beat(seq), budget_s=5)
        _, data, attributes = clients.published[-1]
        checker.check(attributes, "vm-a", "us-central1-a", PROJECT, data=data,
                      published_at=datetime.fromtimestamp(real[0], timezone.utc))  # each one Zen takes
    assert len(metadata.requests) == 2  # refreshed once, five minutes before the first expired


def test_without_a_token_no_heartbeat_goes_and_the_server_is_asked_again_later(config, metadata):
    """Zen would reject and ack a heartbeat without its token (a final report lost): publishing fails
    as a transient error instead, retried within the report's budget, and the metadata server is not
    asked at every try."""
    metadata.failures[IDENTITY_PATH] = [503]
    now = [NOW]
    clients = RecordingClients()
    source = ProofSource(MetadataServer(metadata.host), PROJECT, clock=lambda: now[0])
    transport = PubSubTransport(config, IDENTITY, publisher=clients, subscriber=clients, proof=source)
    for seq in (1, 2):
        with pytest.raises(TransportError, match="no VM identity token"):
            transport.publish(beat(seq), budget_s=0.5)
    assert clients.published == [] and len(metadata.requests) == 1
    now[0] += 31
    transport.publish(beat(3), budget_s=5)
    assert joined_token(clients.published[-1][2]) == metadata.values[IDENTITY_PATH]


def test_where_the_token_comes_from(metadata):
    assert ProofSource.from_env({}, IDENTITY) is None  # the identity came from the environment: tests
    local = ProofSource.from_env({"ZEN_VM_PROOF_METADATA_HOST": metadata.host}, IDENTITY)
    assert local is not None and local.token() == metadata.values[IDENTITY_PATH]
    on_gce = ProofSource.from_env({"GCE_METADATA_HOST": metadata.host}, replace(IDENTITY, from_environment=False))
    assert on_gce is not None and on_gce.token() == metadata.values[IDENTITY_PATH]


def test_where_zen_does_not_require_tokens_a_heartbeat_goes_without_one_it_could_not_get(config, metadata):
    """Zen's ``vm_proof = off`` reaches the agent as the template's ``zen-vm-proof`` attribute (or
    ``ZEN_VM_PROOF``): a metadata outage then costs the token, not the heartbeat (withheld for minutes,
    Zen took the VM's jobs for lost). Required (the attribute ``required``, or absent) withholds as before."""
    on_gce = replace(IDENTITY, from_environment=False)
    metadata.values["instance/attributes/zen-vm-proof"] = "off"
    off = ProofSource.from_env({"GCE_METADATA_HOST": metadata.host}, on_gce)
    assert not off.required and off.token() == metadata.values[IDENTITY_PATH]  # a token it can get still goes
    assert ProofSource.from_env({"GCE_METADATA_HOST": metadata.host, "ZEN_VM_PROOF": "required"}, on_gce).required
    metadata.values["instance/attributes/zen-vm-proof"] = "required"
    assert ProofSource.from_env({"GCE_METADATA_HOST": metadata.host}, on_gce).required
    del metadata.values["instance/attributes/zen-vm-proof"]
    assert ProofSource.from_env({"GCE_METADATA_HOST": metadata.host}, on_gce).required
    metadata.values["instance/attributes/zen-vm-proof"] = "off"
    metadata.failures["instance/attributes/zen-vm-proof"] = [503] * 20  # unreadable: required, no traceback
    assert ProofSource.from_env({"GCE_METADATA_HOST": metadata.host}, on_gce).required
    metadata.failures.clear()
    del metadata.values["instance/attributes/zen-vm-proof"]
    assert not ProofSource.from_env({"GCE_METADATA_HOST": metadata.host, "ZEN_VM_PROOF": "off"}, on_gce).required

    metadata.failures[IDENTITY_PATH] = [503]
    clients = RecordingClients()
    source = ProofSource(MetadataServer(metadata.host), PROJECT, clock=lambda: NOW, required=False)
    transport = PubSubTransport(config, IDENTITY, publisher=clients, subscriber=clients, proof=source)
    transport.publish(beat(1), budget_s=10)
    assert [attributes for _, _, attributes in clients.published] == [{"kind": "job", "vm": "vm-a"}]


def test_a_heartbeat_whose_budget_ends_before_the_next_fetch_fails_at_once(config, metadata):
    """After a failed fetch the metadata server is asked again 30 s later: a 10 s VM heartbeat cannot
    get a token by retrying, and burning its budget held the agent's lock meanwhile."""
    import time

    metadata.failures[IDENTITY_PATH] = [503]
    clients = RecordingClients()
    source = ProofSource(MetadataServer(metadata.host), PROJECT, clock=lambda: NOW)
    transport = PubSubTransport(config, IDENTITY, publisher=clients, subscriber=clients, proof=source)
    began = time.monotonic()
    with pytest.raises(TransportError, match="none asked for again within this heartbeat's 10 s"):
        transport.publish(beat(1), budget_s=10)
    assert time.monotonic() - began < 5 and clients.published == [] and len(metadata.requests) == 1


class _Shrinking:
    """A token source whose token changes length between two tries (a refresh mid-retry)."""

    required = True

    def __init__(self):
        self.tokens = ["a" * 1500, "b" * 900]

    def token(self):
        return self.tokens.pop(0) if len(self.tokens) > 1 else self.tokens[0]

    def next_fetch_in(self):
        return 0.0

    def attributes(self, token, data, attributes):
        return token_attributes(token)


def test_each_try_sends_only_the_pieces_of_its_own_token(config):
    clients = RecordingClients()
    failed = []
    original = clients.publish

    def publish_failing_once(topic, data, **attributes):
        if not failed:
            failed.append(attributes)
            raise ConnectionError("a transient failure")
        return original(topic, data, **attributes)

    clients.publish = publish_failing_once
    transport = PubSubTransport(config, IDENTITY, publisher=clients, subscriber=clients, proof=_Shrinking())
    transport.publish(beat(1), budget_s=5)
    assert joined_token(clients.published[0][2]) == "b" * 900


def test_the_agent_confirmed_with_its_mac_key_authenticates_every_later_message_with_it(config, metadata, issuer):
    """The CONFIRM of its claim carries the VM's MAC key sealed to the agent's key (``zen.adapters.message_key``):
    the agent (``claim.py``) takes it, and its later heartbeats, job and VM alike, carry ``vm_mac``
    instead of ``vm_sig``; Zen's own checker takes each message as published."""
    from tests.agent.fakes import FakeTransport
    from tests.agent.test_agent_loop import SETTINGS, start_message
    from zen.agent.agent import Agent
    from zen.agent.transport import ControlDelivery
    from zen.adapters.message_key import MAC_ATTRIBUTE, SEALED_KEY_ATTRIBUTE
    from zen.core.models import ControlAction, ControlMessage

    key = MessageKey()
    metadata.values[IDENTITY_PATH] = issuer.token(vm="vm-a", zone="us-central1-a", project=PROJECT,
                                                  audience=audience(PROJECT, key.fingerprint), now=NOW)
    clients = RecordingClients()
    wire = PubSubTransport(config, IDENTITY, publisher=clients, subscriber=clients,
                           proof=ProofSource(MetadataServer(metadata.host), PROJECT, clock=lambda: NOW, key=key))
    zen = ProofChecker("required", "http://certs.invalid/", audience(PROJECT),
                       lambda: datetime.fromtimestamp(NOW, timezone.utc), fetch=lambda _: (issuer.certs(), 3600),
                       secrets=(b"z" * 32,))
    checked: list[str] = []

    class Proving(FakeTransport):
        """Publishes through the real transport (token, key, signature or MAC) as well."""

        def publish(self, message, *, budget_s, **abandon):
            wire.publish(message, budget_s=budget_s)
            super().publish(message, budget_s=budget_s)

        def learn_mac_key(self, sealed):
            super().learn_mac_key(sealed)
            wire.learn_mac_key(sealed)

    def answer(message):
        _, data, attributes = clients.published[-1]
        proven = zen.check(attributes, "vm-a", "us-central1-a", PROJECT, data=data)  # Rejected: the agent fails
        checked.append(f"{getattr(message, 'status', 'vm')}:{'mac' if MAC_ATTRIBUTE in attributes else 'sig'}")
        if getattr(message, "status", None) is not AgentStatus.CLAIMED:
            return []
        order = ControlMessage(vm="vm-a", job_id=message.job_id, attempt=message.attempt,
                               action=ControlAction.CONFIRM, reason="claim won")
        return [ControlDelivery("c-1", order.to_bytes(), {"vm": "vm-a", "answers": str(message.seq),
                                SEALED_KEY_ATTRIBUTE: zen.seal(proven, "vm-a", PROJECT)}, lambda: None)]

    transport = Proving("vm-a", virtual_time=False)
    transport.answer = answer
    transport.add_start(start_message(attempt=1))
    agent = Agent(IDENTITY, SETTINGS, transport, local=True, clock=transport.clock)
    transport.when_idle = lambda: agent.request_shutdown("test over")
    assert agent.run() == 0

    assert [c for c in transport.calls if c[0] == "learn_mac_key"] and key.mac_key is not None
    claimed = checked.index("AgentStatus.CLAIMED:sig")
    assert checked[:claimed + 1] == ["vm:sig", "AgentStatus.CLAIMED:sig"], checked  # before the CONFIRM
    later = checked[claimed + 1:]
    assert "AgentStatus.SUCCEEDED:mac" in later and all(c.endswith(":mac") for c in later), checked
