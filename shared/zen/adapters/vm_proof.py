"""A heartbeat's proof of its sender, Zen's side: :class:`ProofChecker` checks that the VM's
Google-signed identity token (attribute ``vm_proof``) verifies and names the VM, zone and project the
heartbeat names, and that the message is signed by the key the token binds (``vm_sig``), or carries
the HMAC under the VM's MAC key (``vm_mac``; with ``ZEN_PROOF_SECRET``, sealed into the CONFIRM by
:meth:`ProofChecker.seal`). ``ZEN_VM_PROOF``: ``required`` (the default) or ``off``. The agent's half
is ``zen.adapters.message_key``.
Fields: docs/reference/messages.md#heartbeat; why: docs/explanations/security.md#why-a-heartbeats-proof-is-made-so
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from zen.adapters.google_tokens import (  # noqa: F401  (fetch_certs, unverified_claims: re-exported)
    CLOCK_SKEW_S, GOOGLE_CERTS_URL, Fetch, GoogleTokens, Remembered, fetch_certs, judged_at, unverified_claims,
)
from zen.core.errors import ConfigError, Rejected
from zen.adapters.message_key import (
    ATTRIBUTE, KEY_ATTRIBUTE, KEY_EXPONENTS, MAC_ATTRIBUTE, MAX_KEY_CHARS, SIGNATURE_ATTRIBUTE, audience, b64decode,
    b64encode, joined_token, key_fingerprint, keyed, mac, mac_key, oaep, rsa_scheme, signed_bytes,
)
from zen.core.text import escape_unstorable

log = logging.getLogger("zen.adapters.vm_proof")

MODES = ("off", "required")
MAX_REMEMBERED = 10_000  # verified tokens remembered at most (one per VM and hour)


@dataclass
class Proven:
    """A verified token (remembered until it expires): its claims, the message key its audience binds
    (and that key's fingerprint), and the VM's MAC keys under Zen's secrets (derived when first needed)."""

    claims: dict[str, Any]
    key: Any
    fingerprint: str
    mac_keys: list[bytes] | None = field(default=None, repr=False)
    macs: list[Any] = field(default_factory=list, repr=False)  # the same keys, keyed (message_key.keyed)

    @property
    def created_at(self) -> datetime | None:
        """When the VM was created (``instance_creation_timestamp``: ``zen.core.incarnation``); None if unsaid."""
        made = ((self.claims.get("google") or {}).get("compute_engine") or {}).get("instance_creation_timestamp")
        if isinstance(made, bool) or not isinstance(made, (int, float)):
            return None
        try:
            return datetime.fromtimestamp(made, timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None


def _check_signature(key: Any, data: bytes, attributes: Mapping[str, str], vm: str) -> None:
    """Raise ``Rejected`` unless ``key`` (a token's bound key) signed this message (``vm_sig``)."""
    pad, hashing, invalid = rsa_scheme()
    signature = attributes.get(SIGNATURE_ATTRIBUTE)
    if not signature:
        raise Rejected(f"the heartbeat carries no {SIGNATURE_ATTRIBUTE} attribute (its signature by the key its "
                       f"{ATTRIBUTE} token binds) and no {MAC_ATTRIBUTE}: a token copied onto another message, "
                       "or an agent that predates signed heartbeats")
    try:
        key.verify(b64decode(signature[:MAX_KEY_CHARS]), signed_bytes(data, attributes), pad, hashing)
    except (invalid, ValueError):
        raise Rejected(f"the heartbeat's {SIGNATURE_ATTRIBUTE} does not verify with the key its {ATTRIBUTE} "
                       f"token binds: its body or attributes are not what VM {escape_unstorable(vm, 200)} "
                       "signed (a token copied onto another message?)") from None


def secrets_from(value: str | None) -> tuple[bytes, ...]:
    """``ZEN_PROOF_SECRET``: one secret, or several separated by commas (the first makes the MAC keys Zen
    gives; all are accepted: a rotation puts the new one first and drops the old one a day later)."""
    secrets = tuple(s.strip().encode() for s in (value or "").split(",") if s.strip())
    if any(len(s) < 32 for s in secrets):
        raise ConfigError("ZEN_PROOF_SECRET: each secret is at least 32 characters (random)")
    return secrets


class ProofChecker:
    """Checks the ``vm_proof`` of heartbeats (see the module's docstring); thread-safe."""

    def __init__(self, mode: str, certs_url: str = GOOGLE_CERTS_URL, audience: str = "",
                 clock: Callable[[], datetime] | None = None, fetch: Fetch = fetch_certs,
                 monotonic: Callable[[], float] = time.monotonic, secrets: tuple[bytes, ...] = ()):
        if mode not in MODES:
            raise ConfigError(f"ZEN_VM_PROOF={mode!r}: use one of {', '.join(MODES)}")
        self.mode = mode
        self.certs_url = certs_url
        self.audience = audience
        self._clock = clock
        self.secrets = secrets  # Zen's MAC key secrets (ZEN_PROOF_SECRET); none: messages are signed only
        self._tokens = GoogleTokens(certs_url, fetch, monotonic)
        self._verified = Remembered(MAX_REMEMBERED)  # token -> its claims and key, until exp

    @property
    def verifications(self) -> int:
        """Signatures checked (tests: a remembered token is not checked again)."""
        return self._tokens.verifications

    @classmethod
    def from_env(cls, project: str, clock: Callable[[], datetime],
                 env: Mapping[str, str] = os.environ) -> "ProofChecker":
        """``ZEN_VM_PROOF``, ``required`` when unset or empty: ``off`` is a choice made explicitly, and
        said loudly once per instance, since it lets anyone who may publish heartbeats speak for any VM."""
        checker = cls((env.get("ZEN_VM_PROOF") or "required").strip().lower(),
                      env.get("ZEN_VM_PROOF_CERTS_URL") or GOOGLE_CERTS_URL, audience(project), clock,
                      secrets=secrets_from(env.get("ZEN_PROOF_SECRET")))
        if checker.mode == "off":
            log.warning("ZEN_VM_PROOF=off: heartbeats are believed without proof of their VM; anyone who "
                        "may publish on the heartbeats topic can report for any VM. Set ZEN_VM_PROOF=required "
                        "(the default) once every agent signs its heartbeats", extra={"vm_proof": "off"})
        return checker

    def ready(self) -> None:
        """``TransientError`` while a report whose token was not verified before would meet one (its
        certificates stale and not fetched): the tick's path probe is held back as such reports are, else the
        probes said the path was prompt while the reports waited in Pub/Sub's backoff, and the sweep took a
        healthy attempt for lost. Nothing in mode off."""
        if self.mode != "off":
            self._tokens.ready()

    @property
    def names_proven(self) -> bool:
        """Whether a heartbeat's VM name is proven (mode ``required``), so its name tells its cluster."""
        return self.mode == "required"

    def check(self, attributes: Mapping[str, str], vm: str, zone: str, project: str,
              published_at: datetime | None = None, region: str | None = None, *, data: bytes) -> Proven | None:
        """Raise ``Rejected`` unless the message's token proves it comes from ``vm`` in ``zone`` of
        ``project`` (mode ``required``), the key its token binds signed this very message (``data``, its
        body, with ``attributes``), and ``zone`` is in ``region`` (given: the heartbeat's; a claim's
        allowed regions and tags are judged by it); ``TransientError`` when the certificates cannot be
        fetched.

        The token must have been valid when the message was published (``published_at``, set by
        Pub/Sub, which no sender can forge), not when it is delivered: a heartbeat held back by an
        outage of Zen's (Pub/Sub redelivering for up to an hour and more) keeps its proof, and a final
        report is not dropped for a token that expired in the queue.

        The message is vouched for by its ``vm_mac`` (HMAC-SHA256 under the VM's MAC key, :meth:`seal`)
        when it has one, else by its ``vm_sig``. Returns the verified token (None: mode ``off``)."""
        proven = self._proven(attributes, vm, zone, project, published_at, region, up=False)
        if proven is None:
            return None
        tag = attributes.get(MAC_ATTRIBUTE)
        if tag is None:
            _check_signature(proven.key, data, attributes, vm)
            return proven
        self._mac_keys(proven, vm, project)
        for key in proven.macs:
            if hmac.compare_digest(mac(key, data, attributes).encode(), tag.encode()):
                return proven
        raise Rejected(f"the heartbeat's {MAC_ATTRIBUTE} is not the MAC of its body and attributes under VM "
                       f"{escape_unstorable(vm, 200)}'s MAC key for the key its {ATTRIBUTE} token binds "
                       "(a token copied onto another message?)")

    def check_up(self, attributes: Mapping[str, str], vm: str, zone: str, project: str,
                 published_at: datetime | None = None, region: str | None = None) -> Proven | None:
        """Raise ``Rejected`` unless a VM's first word (``zen.core.vm_heartbeat.VmUp``) carries its
        identity token for the audience ``<audience>:up`` naming ``vm``, ``zone`` and ``project``. The
        startup script sends it before the agent exists, so it has no message key: the token binds
        nothing of the body, and a copy of it can only say again that this VM is up (which changes no
        row: it may only make a scaling pass run while boots race). Its token cannot vouch for a
        heartbeat (:meth:`check` refuses a token without a bound key). None: mode ``off``."""
        return self._proven(attributes, vm, zone, project, published_at, region, up=True)

    def _proven(self, attributes: Mapping[str, str], vm: str, zone: str, project: str,
                published_at: datetime | None, region: str | None, *, up: bool) -> Proven | None:
        """The message's verified token, which names ``vm``, ``zone`` and ``project`` (None: mode off)."""
        if self.mode == "off":
            return None
        token = joined_token(attributes)
        if not token:
            raise Rejected(f"the heartbeat carries no {ATTRIBUTE} attribute (the identity token of VM {vm}); "
                           "Zen requires one (ZEN_VM_PROOF=required): upgrade the VM's agent (its startup "
                           "script, for a first word), or set vm_proof to off while older agents run")
        if region is not None and not zone.startswith(f"{region}-"):  # the token proves the zone; the region must be the zone's
            raise Rejected(f"the heartbeat names region {escape_unstorable(region, 64)!r} and zone "
                           f"{escape_unstorable(zone, 64)!r}, which is not in it: a VM reports its own region")
        if self._clock is None:
            raise ConfigError("a ProofChecker that checks proofs (mode required) needs a clock")
        now = judged_at(self._clock, published_at)
        proven = self._verified.get(token)
        if proven is None or proven.claims["exp"] <= now - CLOCK_SKEW_S or (proven.key is None) != up:
            proven = self._verify(token, now, attributes, up)
        compute = (proven.claims.get("google") or {}).get("compute_engine") or {}
        named = {"VM": vm, "zone": zone, "project": project}
        token_names = {"VM": compute.get("instance_name"), "zone": compute.get("zone"),
                       "project": compute.get("project_id")}
        for what, value in named.items():
            if token_names[what] != value:
                raise Rejected(f"the heartbeat names {what} {escape_unstorable(str(value), 200)!r} but its "
                               f"{ATTRIBUTE} token is for {what} {escape_unstorable(str(token_names[what]), 200)!r}: "
                               "a VM may only report for itself")
        return proven

    def _mac_keys(self, proven: Proven, vm: str, project: str) -> list[bytes]:
        """The VM's MAC keys for the token's key, one per secret (the first is the one :meth:`seal` gives)."""
        if not self.secrets:
            raise Rejected(f"the heartbeat carries a {MAC_ATTRIBUTE}, but this Zen has no ZEN_PROOF_SECRET and "
                           "gives no MAC keys: it takes signed messages only")
        if proven.mac_keys is None:  # the token names vm in project: checked before this
            keys = [mac_key(secret, project, vm, proven.fingerprint) for secret in self.secrets]
            proven.macs, proven.mac_keys = [keyed(key) for key in keys], keys
        return proven.mac_keys

    def seal(self, proven: Proven | None, vm: str, project: str) -> str | None:
        """VM ``vm``'s MAC key for the key of ``proven`` (its message's verified token), encrypted to that
        key (RSA-OAEP SHA-256), for the CONFIRM that answers its claim; None without ZEN_PROOF_SECRET."""
        if proven is None or not self.secrets:
            return None
        return b64encode(proven.key.encrypt(self._mac_keys(proven, vm, project)[0], oaep()))

    def _verify(self, token: str, now: float, attributes: Mapping[str, str], up: bool = False) -> Proven:
        claims = self._tokens.verify(token, now, f"the {ATTRIBUTE} token", "the agent")
        key, fingerprint = self._up_audience(claims.get("aud")) if up else self._bound_key(claims.get("aud"), attributes)
        return self._verified.put(token, Proven(claims, key, fingerprint), now, lambda p: p.claims["exp"])

    def _up_audience(self, aud: Any) -> tuple[None, str]:
        """A first word's token: for ``<audience>:up``, binding no key."""
        if aud != f"{self.audience}:up":
            raise Rejected(f"the {ATTRIBUTE} token of a VM's first word is for audience {str(aud)[:200]!r}, not "
                           f"{self.audience}:up: the startup script asks for the wrong audience (another "
                           "project's Zen?)")
        return None, ""

    def _bound_key(self, aud: Any, attributes: Mapping[str, str]) -> tuple[Any, str]:
        """The message key the token's audience binds (module docstring), from the ``vm_key`` attribute."""
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.hazmat.primitives.serialization import load_der_public_key

        prefix = f"{self.audience}:key:"
        if aud == self.audience:
            raise Rejected(f"the {ATTRIBUTE} token's audience {self.audience!r} binds no message key: the agent "
                           "predates signed heartbeats (a token alone could be replayed onto any message); "
                           "upgrade the VM's agent, or set vm_proof to off while older agents run")
        if not isinstance(aud, str) or not aud.startswith(prefix):
            raise Rejected(f"the {ATTRIBUTE} token is for audience {str(aud)[:200]!r}, not {prefix}<key>: the "
                           "agent asks for the wrong audience (another project's Zen?)")
        public = attributes.get(KEY_ATTRIBUTE) or ""
        if not public or len(public) > MAX_KEY_CHARS:
            raise Rejected(f"the heartbeat carries no usable {KEY_ATTRIBUTE} attribute (the key its {ATTRIBUTE} "
                           "token binds, which signs the message)")
        try:
            fingerprint = key_fingerprint(public)
            key = load_der_public_key(b64decode(public))
        except (ValueError, TypeError, UnsupportedAlgorithm):
            raise Rejected(f"the heartbeat's {KEY_ATTRIBUTE} is not a public key") from None
        if fingerprint != aud[len(prefix):]:
            raise Rejected(f"the heartbeat's {KEY_ATTRIBUTE} is not the key its {ATTRIBUTE} token binds: a token "
                           "vouches only for the messages of the agent that asked for it")
        if (not isinstance(key, rsa.RSAPublicKey) or not 2048 <= key.key_size <= 4096
                or key.public_numbers().e not in KEY_EXPONENTS):  # a costlier key would cost Zen each message
            raise Rejected(f"the heartbeat's {KEY_ATTRIBUTE} is not an RSA key of 2048 to 4096 bits with "
                           f"exponent {' or '.join(map(str, KEY_EXPONENTS))}")
        return key, fingerprint
