"""The agent's half of a heartbeat's proof (``zen.adapters.vm_proof``): the token as message attributes,
the audience that binds it to the agent's key, what is signed of a message (:func:`signed_bytes`),
the per-VM MAC key Zen derives from its secret (:func:`mac_key`), and the agent's :class:`MessageKey`,
which signs a message (RSA-PSS) or, once Zen has given it its MAC key, authenticates it with HMAC-SHA256.
Fields: docs/reference/messages.md#heartbeat; why: docs/explanations/security.md#why-a-heartbeats-proof-is-made-so
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
import urllib.parse
from typing import Any, Callable, Mapping

log = logging.getLogger("zen.adapters.vm_proof")

ATTRIBUTE = "vm_proof"  # the Pub/Sub message attribute that carries the token
KEY_ATTRIBUTE = "vm_key"  # the agent's message key (DER SubjectPublicKeyInfo, base64url)
SIGNATURE_ATTRIBUTE = "vm_sig"  # that key's signature of the message (signed_bytes), base64url
MAC_ATTRIBUTE = "vm_mac"  # HMAC-SHA256 of signed_bytes under the VM's MAC key, base64url
SEALED_KEY_ATTRIBUTE = "vm_mac_key"  # on a CONFIRM: the MAC key, RSA-OAEP-encrypted to the agent's key
SIGNED_DOMAIN = b"zen-heartbeat/1\n"  # what a message key's signature is for, first in what it signs
MAC_DOMAIN = "zen-vm-mac"  # what a derived MAC key is for, first in what derives it
KEY_BITS = 2048  # a message key's size; Zen takes 2048 to 4096 (a bigger key costs Zen more per message)
KEY_EXPONENTS = (3, 65537)  # the public exponents Zen takes (the agent's: 3, the cheapest to verify)
# How long an agent uses a MAC key Zen gave; then it signs until a CONFIRM gives it another. Zen derives keys from
# ZEN_PROOF_SECRET, whose rotation drops the old secret a day after the new one is first: an agent running one job
# for days confirms nothing, and its MACs under a key of the old secret were then all refused (the job taken for
# lost and run again beside it).
MAC_KEY_TTL_S = 12 * 3600.0
MAX_KEY_CHARS = 1000  # a 4096-bit key's DER is 550 bytes (736 characters); one attribute holds 1,024
IDENTITY_PATH = "instance/service-accounts/default/identity"  # under computeMetadata/v1/
PIECE_CHARS = 1000  # Pub/Sub caps an attribute's value at 1,024 bytes; a real token is ~1,050-1,100


def token_attributes(token: str, name: str = ATTRIBUTE) -> dict[str, str]:
    """The token as message attributes: ``vm_proof`` (or ``name``), then ``vm_proof_1``, ``vm_proof_2``... of
    at most ``PIECE_CHARS`` each (a JWT is ASCII). A ``format=full`` token with the instance's email and ids
    outgrows one attribute, and Pub/Sub refuses the whole message (InvalidArgument) rather than cut it."""
    pieces = [token[i:i + PIECE_CHARS] for i in range(0, len(token), PIECE_CHARS)] or [""]
    return {name if n == 0 else f"{name}_{n}": piece for n, piece in enumerate(pieces)}


def joined_token(attributes: Mapping[str, str], name: str = ATTRIBUTE, most: int = 16) -> str | None:
    """The token :func:`token_attributes` cut into pieces (at most ``most``), whole again; None when there
    is none."""
    first = attributes.get(name)
    if not first:
        return None
    pieces, n = [first], 1
    while (piece := attributes.get(f"{name}_{n}")) is not None and n < most:
        pieces.append(piece)
        n += 1
    return "".join(pieces)


def audience(project: str, fingerprint: str | None = None) -> str:
    """The audience agents ask their token for: one per project, so a token made for anything else
    (or another Zen) is refused; with ``fingerprint`` (:attr:`MessageKey.fingerprint`), bound to the
    one key whose signatures it vouches for, as Zen requires."""
    return f"zen-heartbeats:{project}" + (f":key:{fingerprint}" if fingerprint else "")


def identity_query(project: str, fingerprint: str | None = None) -> str:
    """The metadata server's query for this project's token (``format=full``: the VM's claims)."""
    return f"?audience={urllib.parse.quote(audience(project, fingerprint), safe='')}&format=full"


def _unsigned(name: str) -> bool:
    """Attributes a message key's signature does not cover: the proof itself, and what Google's
    clients may add (``goog`` is reserved to Google); Zen reads none of them as the message."""
    return name.startswith((ATTRIBUTE, "goog")) or name in (KEY_ATTRIBUTE, SIGNATURE_ATTRIBUTE, MAC_ATTRIBUTE)


def signed_bytes(data: bytes, attributes: Mapping[str, str]) -> bytes:
    """What a message key signs (or the MAC key authenticates) of a heartbeat: :data:`SIGNED_DOMAIN`, its
    other attributes (sorted, as one JSON line) and its body, byte for byte as published."""
    kept = sorted((name, value) for name, value in attributes.items() if not _unsigned(name))
    return SIGNED_DOMAIN + _JSON.encode(kept).encode() + b"\n" + data


_JSON = json.JSONEncoder(separators=(",", ":"))  # json.dumps's output, without a new encoder per message


def b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def key_fingerprint(public: str) -> str:
    """The fingerprint of a ``vm_key`` value: SHA-256 of its DER bytes, base64url (43 characters)."""
    return b64encode(hashlib.sha256(b64decode(public)).digest())


def mac_key(secret: bytes, project: str, vm: str, fingerprint: str) -> bytes:
    """VM ``vm``'s MAC key for the message key of ``fingerprint``, derived from Zen's secret."""
    return hmac.new(secret, f"{MAC_DOMAIN}:{project}:{vm}:{fingerprint}".encode(), hashlib.sha256).digest()


def keyed(key: bytes) -> hmac.HMAC:
    """An HMAC-SHA256 keyed with ``key``, for :func:`mac` to copy (cheaper than keying it per message)."""
    return hmac.new(key, digestmod=hashlib.sha256)


def mac(key: bytes | hmac.HMAC, data: bytes, attributes: Mapping[str, str]) -> str:
    """The ``vm_mac`` of a message (body ``data``, ``attributes``) under MAC key ``key`` (or :func:`keyed`)."""
    h = key.copy() if isinstance(key, hmac.HMAC) else keyed(key)
    h.update(signed_bytes(data, attributes))
    return b64encode(h.digest())


def oaep() -> Any:
    """The padding a MAC key is encrypted with to the agent's key."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    return padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None)


_scheme: tuple[Any, Any, type[Exception]] | None = None  # (PSS padding, hash, InvalidSignature), made once


def rsa_scheme() -> tuple[Any, Any, type[Exception]]:
    global _scheme
    if _scheme is None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        _scheme = (padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.DIGEST_LENGTH),
                   hashes.SHA256(), InvalidSignature)
    return _scheme


class MessageKey:
    """An agent's own key for its heartbeats (``zen.adapters.vm_proof``): made when the agent starts, kept only
    in its memory. :meth:`attributes` are what a heartbeat carries besides its own: the signature
    until Zen gave this key's MAC key (:meth:`learn`), the MAC after."""

    def __init__(self, bits: int = KEY_BITS, clock: Callable[[], float] = time.monotonic):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        self._clock, self._learned_at = clock, clock()
        self._mac_key: bytes | None = None  # from Zen's CONFIRM (learn); None: messages are signed

        self._key = rsa.generate_private_key(public_exponent=KEY_EXPONENTS[0], key_size=bits)
        self.public = b64encode(self._key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))
        self.fingerprint = key_fingerprint(self.public)

    @property
    def mac_key(self) -> bytes | None:
        return self._mac_key

    @mac_key.setter
    def mac_key(self, key: bytes | None) -> None:
        """A key is used for ``MAC_KEY_TTL_S`` from when it is set, however it was set."""
        self._mac_key, self._learned_at = key, self._clock()

    def sign(self, data: bytes, attributes: Mapping[str, str]) -> str:
        pad, hashing, _ = rsa_scheme()
        return b64encode(self._key.sign(signed_bytes(data, attributes), pad, hashing))

    def learn(self, sealed: str) -> bool:
        """Take the MAC key Zen encrypted to this key (a CONFIRM's ``vm_mac_key``); False (and messages
        stay signed) when it does not decrypt: sealed to another key, or not a key at all."""
        try:
            key = self._key.decrypt(b64decode(sealed[:MAX_KEY_CHARS]), oaep())
        except ValueError:
            log.warning("a MAC key from Zen that this agent's key does not decrypt; messages stay signed")
            return False
        if len(key) != 32:
            return False
        if key != self.mac_key:
            log.info("MAC key from Zen taken: messages are authenticated with HMAC from now on")
        self.mac_key = key
        return True

    def attributes(self, token: str, data: bytes, attributes: Mapping[str, str]) -> dict[str, str]:
        """The token (in pieces), this key and, of ``data`` with ``attributes``, its MAC under the key
        Zen gave (once given, for ``MAC_KEY_TTL_S``), else this key's signature."""
        if self.mac_key is not None and self._clock() - self._learned_at > MAC_KEY_TTL_S:
            log.info("the MAC key from Zen is %.0f hours old: messages are signed until a CONFIRM gives another",
                     MAC_KEY_TTL_S / 3600)
            self.mac_key = None
        known = self.mac_key
        proof = {MAC_ATTRIBUTE: mac(known, data, attributes)} if known else {
            SIGNATURE_ATTRIBUTE: self.sign(data, attributes)}
        return {**token_attributes(token), KEY_ATTRIBUTE: self.public, **proof}
