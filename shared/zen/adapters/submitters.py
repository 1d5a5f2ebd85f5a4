"""Who sent a submission or a stop: :class:`SubmitterChecker` verifies the Google-signed ID token a
message carries (attribute ``zen_auth``, in pieces ``zen_auth_1``... as a VM's token is:
``zen.adapters.message_key.token_attributes``) and gives the e-mail it proves.

Pub/Sub does not tell a subscriber who published, so the proof travels with the message. Accepted:
- a user's token, whose audience is the OAuth client that minted it (``auth.client_ids``: gcloud's and
  its application-default login's by default; a user account cannot ask Google for another audience);
- a service account's token for Zen's own audience (``auth.audience``, default ``zen:<project>``) alone (one
  for a client id would be a token some other service it called may hold), as a program or CI gets it
  (``google.oauth2.id_token.fetch_id_token``, the metadata server's ``identity?audience=``, ``gcloud auth
  print-identity-token --audiences``).
Both: Google's signature, issuer and lifetime (``zen.adapters.google_tokens``; the lifetime judged when
Pub/Sub took the message, as a VM's), and a verified ``email``.

``ZEN_AUTH``: ``required`` (terraform's default) or ``off`` (the sender's ``user_id`` is believed: the
configuration's queue rules still apply to it). A user token is a bearer token for its hour (its
audience binds it to no message): a replayed message does nothing new (the job id's idempotency), but
a token given to another service could be put on new messages; docs/explanations/security.md says so.
Local stacks verify tokens their Compute stand-in signs (``ZEN_AUTH_CERTS_URL``), exactly so.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Mapping

from zen.adapters.message_key import joined_token, token_attributes
from zen.adapters.google_tokens import (
    CLOCK_SKEW_S, GOOGLE_CERTS_URL, Fetch, GoogleTokens, Remembered, fetch_certs, judged_at,
)
from zen.core.config import ZenConfig
from zen.core.errors import ConfigError, Rejected
from zen.core.principals import is_service_account
from zen.core.text import escape_unstorable

log = logging.getLogger("zen.adapters.submitters")

ATTRIBUTE = "zen_auth"  # the message attribute (and zen_auth_1, zen_auth_2, ...) carrying the sender's ID token
MODES = ("off", "required")


def auth_attributes(token: str) -> dict[str, str]:
    """The token as message attributes: ``zen_auth``, then ``zen_auth_1``... of at most 1,000 characters."""
    return token_attributes(token, ATTRIBUTE)


def joined(attributes: Mapping[str, str]) -> str | None:
    """The token :func:`auth_attributes` cut, whole again (at most 8 pieces); None without one."""
    return joined_token(attributes, ATTRIBUTE, most=8)


@dataclass(frozen=True)
class Principal:
    """Who a message proves it comes from: the e-mail its token names, lowercased."""

    email: str
    exp: float  # the token's expiry (epoch seconds): how long it is remembered


class SubmitterChecker:
    """Checks the ``zen_auth`` proof of submissions and stops (module docstring); thread-safe."""

    def __init__(self, mode: str, audience: str, client_ids: tuple[str, ...], clock: Callable[[], datetime],
                 certs_url: str = GOOGLE_CERTS_URL, fetch: Fetch = fetch_certs,
                 monotonic: Callable[[], float] = time.monotonic):
        if mode not in MODES:
            raise ConfigError(f"ZEN_AUTH={mode!r}: use one of {', '.join(MODES)}")
        self.mode = mode
        self.audiences = frozenset((audience, *client_ids))
        self._audience = audience
        self._clock = clock
        self._tokens = GoogleTokens(certs_url, fetch, monotonic)
        self._verified = Remembered()

    @classmethod
    def from_env(cls, config: ZenConfig, clock: Callable[[], datetime],
                 env: Mapping[str, str] = os.environ) -> "SubmitterChecker":
        """``ZEN_AUTH`` (unset: ``off``, so a stack without identities keeps working; terraform and the
        local stack set ``required``; ``off`` said explicitly is said loudly, as a deployment's choice),
        ``ZEN_AUTH_CERTS_URL`` (Google's by default)."""
        mode = (env.get("ZEN_AUTH") or "off").strip().lower()
        checker = cls(mode, config.auth.audience_of(config.project), tuple(config.auth.client_ids), clock,
                      env.get("ZEN_AUTH_CERTS_URL") or GOOGLE_CERTS_URL)
        if env.get("ZEN_AUTH") and mode == "off":
            log.warning("ZEN_AUTH=off: submissions and stops are believed to come from the user_id they claim; "
                        "anyone who may publish can act as any user. Set ZEN_AUTH=required (terraform's default)",
                        extra={"zen_auth": "off"})
        return checker

    @property
    def required(self) -> bool:
        return self.mode == "required"

    @property
    def verifications(self) -> int:
        return self._tokens.verifications

    def check(self, attributes: Mapping[str, str], published_at: datetime | None = None) -> Principal | None:
        """The proven sender of a message with these ``attributes`` (None: mode ``off``); ``Rejected``
        with the reason when its proof is missing or does not hold, ``TransientError`` when Google's
        certificates cannot be fetched."""
        if self.mode == "off":
            return None
        token = joined(attributes)
        if not token:
            raise Rejected(f"the message carries no {ATTRIBUTE} attribute (the sender's Google ID token); this Zen "
                           "requires one (ZEN_AUTH=required): submit with `zen submit`, which attaches it, or see "
                           "docs/how-to/submit-from-code.md")
        now = judged_at(self._clock, published_at)  # valid when Pub/Sub took it, as a VM's
        principal = self._verified.get(token)
        if principal is None or principal.exp <= now - CLOCK_SKEW_S:
            principal = self._verify(token, now)
        return principal

    def _verify(self, token: str, now: float) -> Principal:
        claims = self._tokens.verify(token, now, f"the {ATTRIBUTE} token", "the sender")
        aud = claims.get("aud")
        if aud not in self.audiences:
            raise Rejected(f"the {ATTRIBUTE} token is for audience {escape_unstorable(str(aud), 200)!r}, which this Zen "
                           f"does not take: a service account asks for {self._audience!r}; a user's token comes "
                           "from gcloud (auth.client_ids lists the clients accepted)")
        email = claims.get("email")
        if not isinstance(email, str) or not email or claims.get("email_verified") is not True:
            raise Rejected(f"the {ATTRIBUTE} token names no verified e-mail: a service account's token must be "
                           "asked for with its e-mail (format=full, or include_email), a user's must come from a "
                           "verified Google account")
        if aud != self._audience and is_service_account(email):  # one a service it called got: another's bearer token
            raise Rejected(f"the {ATTRIBUTE} token is service account {escape_unstorable(email, 200)}'s for audience "
                           f"{escape_unstorable(str(aud), 200)!r}: a service account's token must be asked for Zen's "
                           f"own, {self._audience!r}, which no other service takes (`gcloud auth "
                           f"print-identity-token --audiences={self._audience}`, or fetch_id_token)")
        return self._verified.put(token, Principal(email.lower(), float(claims["exp"])), now, lambda p: p.exp)
