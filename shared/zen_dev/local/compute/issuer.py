"""The stand-in's identity tokens: VMs' (``zen.adapters.vm_proof``), what the GCE metadata server and
Google's certificate endpoint are to real VMs, and people's and programs' (``zen.adapters.submitters``),
what Google's sign-in is to ``zen submit``.

An RSA key made when the stand-in starts signs each VM's token (RS256, Google's issuer, the claims of
``format=full``); :meth:`TokenIssuer.certs` is its certificate as Google's ``oauth2/v1/certs`` gives
it. Served by ``zen_dev.local.compute.server``, each VM's token only while it runs.
Paths and what it proves: docs/reference/simulator.md#what-the-compute-stand-in-simulates
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from typing import Any

TOKEN_LIFETIME_S = 3600
ISSUER = "https://accounts.google.com"


class TokenIssuer:
    def __init__(self, lifetime_s: int = TOKEN_LIFETIME_S):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "zen-local-compute-standin")])
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
                .not_valid_after(now + dt.timedelta(days=365)).sign(key, hashes.SHA256()))
        self.kid = secrets.token_hex(20)
        self._created: dict[tuple[str, str], int] = {}  # (VM, instance id) -> its creation (token())
        self.lifetime_s = lifetime_s
        self._cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        self._key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()).decode()
        self._signer: Any = None  # made at the first token: reading the key back took 31 ms a token

    def _signed(self, claims: dict[str, Any]) -> str:
        from google.auth import crypt, jwt

        if self._signer is None:  # (two requests at once may each make one: either signs)
            self._signer = crypt.RSASigner.from_string(self._key_pem, key_id=self.kid)
        return jwt.encode(self._signer, claims).decode()

    def certs(self) -> dict[str, str]:
        return {self.kid: self._cert_pem}

    def token(self, *, vm: str, zone: str, project: str, audience: str, instance_id: int | str = 0,
              now: float | None = None, created: float | None = None, **overrides: Any) -> str:
        """A signed ``format=full`` token; ``overrides`` replace claims (tests make bad ones). Its
        ``instance_creation_timestamp`` is ``created``, else the earliest token of that VM and instance id
        (a VM exists before its first token, and its creation does not move with each new one)."""
        issued = int(time.time() if now is None else now)
        if created is None:
            instance = (vm, str(instance_id))
            created = self._created[instance] = min(self._created.get(instance, issued), issued)
        claims: dict[str, Any] = {
            # As GCE's: the service account's numeric id and e-mail too, which take a real token past
            # the 1,024 bytes of one Pub/Sub attribute (zen.adapters.message_key.token_attributes).
            "iss": ISSUER, "aud": audience, "azp": "104514213436198513925", "sub": "104514213436198513925",
            "email": f"zen-agent@{project}.iam.gserviceaccount.com", "email_verified": True, "iat": issued,
            "exp": issued + self.lifetime_s,
            "google": {"compute_engine": {"instance_name": vm, "instance_id": str(instance_id), "zone": zone,
                                          "project_id": project, "project_number": 0,
                                          "instance_creation_timestamp": int(created)}},
        }
        claims.update(overrides)
        return self._signed(claims)

    def user_token(self, *, email: str, audience: str, now: float | None = None, **overrides: Any) -> str:
        """A signed ID token of a person or a service account (``zen.adapters.submitters``), as Google
        gives one: ``email``, ``email_verified``, and ``aud`` the OAuth client (a user's) or the audience
        asked for (a service account's); ``overrides`` replace claims (tests make bad ones)."""
        issued = int(time.time() if now is None else now)
        subject = str(int.from_bytes(email.lower().encode()[:8].ljust(8, b"0"), "big"))  # stable per e-mail
        claims: dict[str, Any] = {"iss": ISSUER, "aud": audience, "azp": audience, "sub": subject, "email": email,
                                  "email_verified": True, "iat": issued, "exp": issued + self.lifetime_s}
        claims.update(overrides)
        return self._signed(claims)
