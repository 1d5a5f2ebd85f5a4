"""Google-signed identity tokens (RS256 JWTs), checked the one way Zen checks them: the signature by a
key the issuer's certificate URL lists (cached as long as its ``Cache-Control: max-age`` says), a
Google issuer, and a lifetime judged by Zen's own clock. The audience and the claims that name who
is speaking are the callers': a VM's heartbeat (``zen.adapters.vm_proof``) and a submitter's message
(``zen.adapters.submitters``). ``google.auth.crypt`` checks signatures; ``google.auth.jwt.decode``
is not used because it takes the time from the system, and tests and the simulator move Zen's clock.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from typing import Any, Callable

from zen.adapters.message_key import b64decode
from zen.core.errors import Rejected, TransientError

log = logging.getLogger("zen.adapters.google_tokens")

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
ISSUERS = ("https://accounts.google.com", "accounts.google.com")
CLOCK_SKEW_S = 60  # how far a token's iat may be ahead of Zen's clock, and its exp behind it
REFETCH_PAUSE_S = 60.0  # an unknown key id refetches the certificates at most this often
DEFAULT_MAX_AGE_S = 3600.0  # the certificates' lifetime when the answer does not say
MAX_TOKEN_CHARS = 4096  # a real token is ~900-1,100; anything far longer is refused undecoded

Fetch = Callable[[str], tuple[dict[str, str], float]]  # url -> ({kid: PEM}, max-age seconds)


def unverified_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, unverified (an agent reads its own token's ``exp``)."""
    return decode(token)[1]


def decode(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """(header, claims, signed bytes, signature) of a JWT; ``ValueError`` when it is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("not a JWT (three dot-separated parts)")
    header, claims = (json.loads(b64decode(p)) for p in parts[:2])
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise ValueError("a JWT's header and claims are JSON objects")
    return header, claims, f"{parts[0]}.{parts[1]}".encode("ascii"), b64decode(parts[2])


def fetch_certs(url: str, timeout_s: float = 10.0) -> tuple[dict[str, str], float]:
    """Google's v1 certificates (``{kid: PEM}``) and how long they may be kept (``max-age``)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            certs = json.loads(response.read())
            cache_control = response.headers.get("Cache-Control") or ""
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise TransientError(f"cannot fetch the certificates that verify identity tokens from {url}: {exc}") from None
    if not isinstance(certs, dict) or not all(isinstance(v, str) for v in certs.values()):
        raise TransientError(f"{url} did not answer {{key id: certificate}}")
    match = re.search(r"max-age=(\d+)", cache_control)
    return certs, float(match.group(1)) if match else DEFAULT_MAX_AGE_S


def judged_at(clock: Callable[[], datetime], published_at: datetime | None) -> float:
    """When a message's token must have been valid (epoch seconds): when Pub/Sub took the message, which
    no sender can forge, not when it is delivered. A message held back by an outage of Zen's (Pub/Sub
    redelivering for an hour and more) keeps its proof."""
    now = clock().timestamp()
    if published_at is not None and published_at.tzinfo is not None:
        now = min(now, published_at.timestamp())
    return now


class GoogleTokens:
    """Verifies tokens against ``certs_url``'s certificates; thread-safe. Google's ID tokens are RS256 from
    ``ISSUERS``; Identity-Aware Proxy's signed headers are ES256 from its own issuer (``zen.adapters.iap``)."""

    def __init__(self, certs_url: str = GOOGLE_CERTS_URL, fetch: Fetch = fetch_certs,
                 monotonic: Callable[[], float] = time.monotonic, algorithm: str = "RS256",
                 issuers: tuple[str, ...] = ISSUERS):
        self.certs_url = certs_url
        self.algorithm, self.issuers = algorithm, issuers
        self._fetch = fetch
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._certs: dict[str, str] = {}
        self._certs_until = float("-inf")  # monotonic time the certificates are good until
        self._fetched_at = float("-inf")
        self.verifications = 0  # signatures checked (tests: a remembered token is not checked again)

    def verify(self, token: str, now: float, what: str, renew: str) -> dict[str, Any]:
        """The claims of ``token`` once its signature, issuer and lifetime (at ``now``, epoch seconds)
        hold; else ``Rejected`` (``TransientError`` when the certificates cannot be fetched). ``what``
        names the token in refusals ("the vm_proof token"), ``renew`` who must fetch a new one."""
        from google.auth import crypt  # the adapter library, only where tokens are checked

        if len(token) > MAX_TOKEN_CHARS:
            raise Rejected(f"{what} is {len(token)} characters long, over {MAX_TOKEN_CHARS}: not an identity token")
        try:
            header, claims, signed, signature = decode(token)
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: JSON nested too deep
            raise Rejected(f"{what} is not a JWT") from None
        if header.get("alg") != self.algorithm:
            raise Rejected(f"{what} is signed with {str(header.get('alg'))[:20]!r}, not {self.algorithm}")
        kid = str(header.get("kid"))
        # An unknown key refetches the certificates (at most once a REFETCH_PAUSE_S); still unknown, or
        # unknown within the pause, the token is refused: Google lists a key before it signs with it, so
        # a fetch less than a minute old lists every key a real token can have. (Retrying, on the
        # token's own word that it was issued after the fetch, let a forged iat earn 5xx after 5xx.)
        cert, _ = self._cert(kid)
        if cert is None:
            raise Rejected(f"{what} is signed by key {kid[:64]!r}, which {self.certs_url} does not list: it is "
                           "not a Google-signed identity token")
        self.verifications += 1
        verifier = crypt.ES256Verifier if self.algorithm == "ES256" else crypt.RSAVerifier
        if not verifier.from_string(cert).verify(signed, signature):
            raise Rejected(f"{what}'s signature does not verify: it is not a Google-signed identity token")
        if claims.get("iss") not in self.issuers:
            issuer = "Google's" if self.issuers == ISSUERS else self.issuers[0]
            raise Rejected(f"{what}'s issuer {str(claims.get('iss'))[:100]!r} is not {issuer}")
        exp, iat = claims.get("exp"), claims.get("iat", 0)
        if not isinstance(exp, (int, float)) or not isinstance(iat, (int, float)):
            raise Rejected(f"{what} has no numeric exp and iat")
        if exp <= now - CLOCK_SKEW_S:
            raise Rejected(f"{what} expired at {datetime.fromtimestamp(exp, timezone.utc).isoformat()} ({now - exp:.0f} s ago): "
                           f"{renew} must fetch a new one")
        if iat > now + CLOCK_SKEW_S:
            raise Rejected(f"{what} was issued {iat - now:.0f} s in the future")
        return claims

    def ready(self) -> None:
        """The certificates fetched again if stale; ``TransientError`` when they cannot be (what a token not
        verified before would meet)."""
        self._cert(None)

    def _cert(self, kid: str | None) -> tuple[str | None, bool]:
        """The key's certificate, and whether the certificates were fetched for this answer."""
        with self._lock:
            moment = self._monotonic()
            stale = moment >= self._certs_until
            unknown = kid is not None and kid not in self._certs and moment - self._fetched_at >= REFETCH_PAUSE_S
            if stale or unknown:
                certs, max_age = self._fetch(self.certs_url)
                self._certs, self._fetched_at = certs, moment
                self._certs_until = moment + max_age
                log.info("identity token certificates fetched", extra={"url": self.certs_url, "keys": len(certs)})
            return self._certs.get(kid) if kid is not None else None, stale or unknown


class Remembered:
    """Verified tokens, each until it expires: a sender reuses one token for most of its hour, so a
    message after the first costs a dictionary lookup. Bounded; thread-safe."""

    def __init__(self, limit: int = 10_000):
        self._limit = limit
        self._lock = threading.Lock()
        self._items: dict[str, Any] = {}

    def get(self, token: str) -> Any:
        return self._items.get(token)

    def put(self, token: str, value: Any, now: float, expires: Callable[[Any], float]) -> Any:
        with self._lock:
            if len(self._items) >= self._limit:
                self._items = {t: v for t, v in self._items.items() if expires(v) > now}
                if len(self._items) >= self._limit:
                    self._items.clear()
            self._items[token] = value
        return value
