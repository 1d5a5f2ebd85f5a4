"""A VM's MAC key (``zen.adapters.message_key``): Zen seals it, in the CONFIRM of a claim, to the message key the
VM's token binds; the agent's messages then carry ``vm_mac`` instead of ``vm_sig``, and Zen checks an
HMAC under the key it derives from its secret, the VM and that key's fingerprint. Real keys, real
tokens (the Compute stand-in's issuer), Zen's own checker."""

from __future__ import annotations

import pytest

from tests.test_vm_proof import BODY, PROJECT, VM, ZONE, Certs, clock, issuer, token  # noqa: F401 - fixtures
from zen.adapters.message_key import MAC_ATTRIBUTE, MAC_KEY_TTL_S, SIGNATURE_ATTRIBUTE, MessageKey, audience, joined_token, mac, mac_key
from zen.adapters.vm_proof import ProofChecker, secrets_from
from zen.core.errors import ConfigError, Rejected

SECRET, OLD = b"s" * 40, b"o" * 40


def checker(clock, issuer, *secrets: bytes) -> ProofChecker:
    return ProofChecker("required", "http://certs.invalid/", audience(PROJECT), clock, fetch=Certs(issuer),
                        secrets=secrets)


def confirmed(zen: ProofChecker, key: MessageKey, proof: str, vm: str = VM) -> None:
    """The agent's claim (signed) checked by Zen, the CONFIRM's sealed MAC key taken by the agent."""
    claim = {"kind": "job", "vm": vm, **key.attributes(proof, BODY, {"kind": "job", "vm": vm})}
    sealed = zen.seal(zen.check(claim, vm, ZONE, PROJECT, data=BODY), vm, PROJECT)
    assert sealed and key.learn(sealed)


def test_after_the_confirm_the_agent_sends_a_mac_that_zen_takes_and_a_forged_one_is_rejected(issuer, clock):
    zen, key = checker(clock, issuer, SECRET), MessageKey()
    proof = token(issuer, clock, key=key)
    confirmed(zen, key, proof)
    sent = {"kind": "job", "vm": VM, **key.attributes(proof, BODY, {"kind": "job", "vm": VM})}
    assert MAC_ATTRIBUTE in sent and SIGNATURE_ATTRIBUTE not in sent
    assert key.mac_key == mac_key(SECRET, PROJECT, VM, key.fingerprint)
    zen.check(sent, VM, ZONE, PROJECT, data=BODY)
    assert zen.verifications == 1  # the token once, then one HMAC per message

    forged = b'{"job_id": "job-1", "status": "SUCCEEDED", "seq": 3}'
    copied = {k: v for k, v in sent.items() if k != MAC_ATTRIBUTE}  # the token and vm_key, copied
    for fresh in (False, True):  # Zen remembering the token, and an instance meeting it first
        judge = checker(clock, issuer, SECRET) if fresh else zen
        with pytest.raises(Rejected, match="vm_mac is not the MAC of its body and attributes"):
            judge.check(sent, VM, ZONE, PROJECT, data=forged)  # the captured MAC, another body
        with pytest.raises(Rejected, match="vm_mac is not the MAC"):
            judge.check({**sent, "kind": "vm"}, VM, ZONE, PROJECT, data=BODY)  # other attributes
        for wrong in ("", "A" * 43, "é", mac(b"\0" * 32, forged, {"kind": "job", "vm": VM})):
            with pytest.raises(Rejected, match="vm_mac is not the MAC"):
                judge.check({**copied, MAC_ATTRIBUTE: wrong}, VM, ZONE, PROJECT, data=forged)
        with pytest.raises(Rejected, match="carries no vm_sig attribute .* and no vm_mac"):
            judge.check(copied, VM, ZONE, PROJECT, data=forged)


def test_a_mac_under_another_vms_key_is_rejected(issuer, clock):
    """VM B holds its own MAC key; with VM A's token and key copied from a heartbeat, its MAC of a
    report for VM A is under the wrong key. Nor does B's agent take a key sealed to A's."""
    zen = checker(clock, issuer, SECRET)
    key_a, key_b = MessageKey(), MessageKey()
    proof_a, proof_b = token(issuer, clock, key=key_a), token(issuer, clock, vm="vm-b", key=key_b)
    confirmed(zen, key_a, proof_a)
    confirmed(zen, key_b, proof_b, vm="vm-b")
    assert key_a.mac_key != key_b.mac_key
    zen.check({"kind": "job", "vm": "vm-b", **key_b.attributes(proof_b, BODY, {"kind": "job", "vm": "vm-b"})},
              "vm-b", ZONE, PROJECT, data=BODY)
    forged = b'{"job_id": "job-1", "status": "SUCCEEDED", "seq": 9}'
    stolen = {"kind": "job", "vm": VM, **key_a.attributes(proof_a, BODY, {"kind": "job", "vm": VM})}
    stolen[MAC_ATTRIBUTE] = mac(key_b.mac_key, forged, {"kind": "job", "vm": VM})
    with pytest.raises(Rejected, match="vm_mac is not the MAC .* under VM vm-a's MAC key"):
        zen.check(stolen, VM, ZONE, PROJECT, data=forged)
    sealed_to_a = zen.seal(zen.check({"kind": "job", "vm": VM, **key_a.attributes(proof_a, BODY, {
        "kind": "job", "vm": VM})}, VM, ZONE, PROJECT, data=BODY), VM, PROJECT)
    other = MessageKey()
    assert not other.learn(sealed_to_a) and other.mac_key is None  # it stays on signatures
    assert SIGNATURE_ATTRIBUTE in other.attributes(proof_b, BODY, {})


def test_without_a_secret_zen_gives_no_key_and_takes_no_mac(issuer, clock):
    zen, key = checker(clock, issuer), MessageKey()
    proof = token(issuer, clock, key=key)
    signed = {"kind": "job", **key.attributes(proof, BODY, {"kind": "job"})}
    assert zen.seal(zen.check(signed, VM, ZONE, PROJECT, data=BODY), VM, PROJECT) is None
    key.mac_key = mac_key(SECRET, PROJECT, VM, key.fingerprint)  # as another Zen (with a secret) gave it
    with pytest.raises(Rejected, match="this Zen has no ZEN_PROOF_SECRET"):
        zen.check({"kind": "job", **key.attributes(proof, BODY, {"kind": "job"})}, VM, ZONE, PROJECT, data=BODY)


def test_a_rotation_seals_with_the_new_secret_and_takes_macs_under_both(issuer, clock):
    key = MessageKey()
    proof = token(issuer, clock, key=key)
    confirmed(checker(clock, issuer, OLD), key, proof)  # confirmed before the rotation
    rotated = checker(clock, issuer, SECRET, OLD)
    rotated.check({"kind": "job", **key.attributes(proof, BODY, {"kind": "job"})}, VM, ZONE, PROJECT, data=BODY)
    confirmed(rotated, key, joined_token(key.attributes(proof, BODY, {})))
    assert key.mac_key == mac_key(SECRET, PROJECT, VM, key.fingerprint)
    with pytest.raises(Rejected, match="vm_mac is not the MAC"):  # the old secret dropped: its MACs go
        key.mac_key = mac_key(OLD, PROJECT, VM, key.fingerprint)
        checker(clock, issuer, SECRET).check({"kind": "job", **key.attributes(proof, BODY, {"kind": "job"})},
                                             VM, ZONE, PROJECT, data=BODY)


def test_the_secret_setting():
    assert secrets_from(None) == () and secrets_from(" ") == ()
    assert secrets_from(f" {'a' * 32} , {'b' * 40},") == (b"a" * 32, b"b" * 40)
    with pytest.raises(ConfigError, match="at least 32 characters"):
        secrets_from("short")
    assert ProofChecker.from_env(PROJECT, lambda: None, {"ZEN_PROOF_SECRET": "x" * 32}).secrets == (b"x" * 32,)


def test_a_mac_key_lasts_its_ttl_from_when_it_was_set_on_a_machine_up_for_days():
    """The key's age was counted from 0 until a CONFIRM: a key set otherwise on a machine whose monotonic
    clock was past 12 hours (up that long) was dropped at once and the message signed."""
    now = [5 * 86400.0]
    key = MessageKey(bits=1024, clock=lambda: now[0])
    key.mac_key = b"k" * 32
    assert MAC_ATTRIBUTE in key.attributes("a.b.c", BODY, {})
    now[0] += MAC_KEY_TTL_S + 1
    sent = key.attributes("a.b.c", BODY, {})
    assert SIGNATURE_ATTRIBUTE in sent and MAC_ATTRIBUTE not in sent and key.mac_key is None
