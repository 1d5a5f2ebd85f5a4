"""Who is looking, behind Identity-Aware Proxy: IAP signs a JWT for each request it lets through and sends
it in ``x-goog-iap-jwt-assertion`` (ES256, issuer ``https://cloud.google.com/iap``, audience the protected
backend's: ``/projects/NUMBER/global/backendServices/ID``). Its signature, issuer and lifetime are checked
by ``zen.adapters.google_tokens`` against IAP's published keys; the audience here. The unsigned
``x-goog-authenticated-user-email`` header is never read: a request that bypassed IAP could set it.
"""

from __future__ import annotations

import time
from typing import Callable

from zen.adapters.google_tokens import Fetch, GoogleTokens, fetch_certs
from zen.core.errors import Rejected

HEADER = "x-goog-iap-jwt-assertion"
IAP_KEYS_URL = "https://www.gstatic.com/iap/verify/public_key"  # {key id: PEM public key}
IAP_ISSUER = "https://cloud.google.com/iap"


class IapAssertions:
    """Verifies IAP's signed header for one audience; thread-safe (the keys are fetched and cached once)."""

    def __init__(self, audience: str, keys_url: str = IAP_KEYS_URL, fetch: Fetch = fetch_certs,
                 clock: Callable[[], float] = time.time):
        if not audience:
            raise ValueError("an IAP audience is needed (/projects/NUMBER/global/backendServices/ID)")
        self.audience = audience
        self._clock = clock
        self._tokens = GoogleTokens(keys_url, fetch, algorithm="ES256", issuers=(IAP_ISSUER,))

    def email(self, assertion: str | None) -> str:
        """The e-mail of the signed-in user the assertion names; ``Rejected`` when it is missing, forged,
        expired or meant for another backend (``TransientError`` when IAP's keys cannot be fetched)."""
        if not assertion:
            raise Rejected(f"no {HEADER} header: the console is reached through Identity-Aware Proxy only")
        claims = self._tokens.verify(assertion, self._clock(), f"the {HEADER} header",
                                     "the browser (sign in again)")
        audience = claims.get("aud")
        if audience != self.audience:
            raise Rejected(f"the {HEADER} header is for {str(audience)[:120]!r}, not this console ({self.audience})")
        email = claims.get("email")
        if not isinstance(email, str) or "@" not in email:
            raise Rejected(f"the {HEADER} header names no e-mail")
        return email
