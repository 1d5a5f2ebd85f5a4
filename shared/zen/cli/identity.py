"""Who ``zen submit`` and ``zen stop`` say they are: a Google ID token of the caller, attached to the
message (``zen.adapters.submitters``), from the first of
1. ``ZEN_ID_TOKEN``: a token the caller got itself (a program, a CI step: docs/how-to/submit-from-code.md);
2. a local stack's identity endpoint (``ZEN_IDENTITY_ENDPOINT``, set from ``.zen/stack.json``): a token
   its Compute stand-in signs for ``$ZEN_AS``, else ``$USER``;
3. Application Default Credentials (google-auth): a service account's token for Zen's audience
   (``auth.audience``; a key file, or the metadata server on a VM or in Cloud Build), or the token of a
   user's ``gcloud auth application-default login``;
4. ``gcloud auth print-identity-token`` (a user's gcloud login; a service account's asks for Zen's audience).
Against a Pub/Sub emulator without an identity endpoint, none is looked for. Without any, the message
goes without one: a Zen with ``ZEN_AUTH=off`` takes it, one that requires a
proof refuses it and says why (``zen rejected``).
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass

from zen.core.config import ZenConfig
from zen.core.principals import is_service_account


@dataclass(frozen=True)
class Identity:
    token: str
    email: str  # what the token says (Zen checks it)
    source: str  # where it came from, for messages


def _email(token: str) -> str:
    from zen.adapters.google_tokens import unverified_claims

    try:
        return str(unverified_claims(token).get("email") or "")
    except ValueError:
        return ""


def _given(token: str) -> Identity:
    """``ZEN_ID_TOKEN``'s identity; a value that is no ID token is refused here, before anything is published (it
    was sent, said "submitted ... as  (ZEN_ID_TOKEN)", and the function refused the message)."""
    from zen.adapters.google_tokens import unverified_claims
    from zen.cli.kit import CliError

    try:
        claims = unverified_claims(token)
    except ValueError as exc:
        raise CliError(f"ZEN_ID_TOKEN is not an ID token ({exc}): set it to one, e.g. from `gcloud auth "
                       "print-identity-token`, or unset it (docs/how-to/submit-from-code.md)", 2) from None
    if not claims.get("email"):  # the function refuses it: "names no verified e-mail"
        raise CliError("ZEN_ID_TOKEN names no e-mail (a service account's token fetched without its e-mail): fetch "
                       "it with the e-mail (the metadata server's format=full, "
                       "`gcloud auth print-identity-token --include-email`; docs/how-to/submit-from-code.md)", 2)
    return Identity(token, str(claims["email"]), "ZEN_ID_TOKEN")


def from_local_stack(endpoint: str, who: str, config: ZenConfig) -> Identity:
    """``who``'s token from a local stack's identity endpoint (its Compute stand-in signs it as Google
    signs a person's: audience gcloud's client; a service account's: Zen's), which the stack's functions verify."""
    own = config.auth.audience_of(config.project)
    audience = own if is_service_account(who) or not config.auth.client_ids else config.auth.client_ids[0]
    try:
        with urllib.request.urlopen(f"{endpoint}?{urllib.parse.urlencode({'email': who, 'audience': audience})}",
                                    timeout=10) as answer:
            return Identity(answer.read().decode(), who, "the local stack")
    except OSError as exc:  # a URLError: its Compute stand-in not listening yet, or gone (a raw URLError before)
        from zen.cli.kit import CliError

        raise CliError(f"the local stack does not answer ({endpoint}: {getattr(exc, 'reason', exc)}): still starting? "
                       "wait until `zen local up` says \"Zen is running locally\" (`zen local down` stops one left "
                       "half-started)", 1) from None


def _application_default(config: ZenConfig, publishing: bool) -> Identity | None:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError
    from google.auth.transport.requests import Request
    from google.oauth2 import id_token

    try:
        credentials, _ = google.auth.default(scopes=["openid", "https://www.googleapis.com/auth/userinfo.email"])
    except DefaultCredentialsError:
        if publishing:  # the Pub/Sub client would look for them again (seconds off GCE) and fail the same way
            raise
        return None
    except GoogleAuthError:
        return None
    try:
        if hasattr(credentials, "service_account_email"):  # a key file, or a VM's / Cloud Build's metadata server
            token = id_token.fetch_id_token(Request(), config.auth.audience_of(config.project))
            return Identity(token, _email(token), "the service account of Application Default Credentials")
        credentials.refresh(Request())  # a user's application-default login: Google answers with an ID token
        token = getattr(credentials, "id_token", None)
    except (GoogleAuthError, ValueError, OSError):
        return None
    return Identity(token, _email(token), "gcloud auth application-default login") if token else None


def _gcloud(config: ZenConfig) -> Identity | None:
    """gcloud's login's token: a person's (its audience gcloud's client), or, where gcloud is logged in as a service
    account, one asked for Zen's audience (Zen takes no other from a service account: ``zen.adapters.submitters``)."""
    if shutil.which("gcloud") is None:
        return None
    found = _print_identity_token()
    if found is not None and is_service_account(found.email):
        return _print_identity_token(f"--audiences={config.auth.audience_of(config.project)}")
    return found


def _print_identity_token(*flags: str) -> Identity | None:
    command = ["gcloud", "auth", "print-identity-token", *flags]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    token = done.stdout.strip()
    return Identity(token, _email(token), " ".join(command)) if done.returncode == 0 and token else None


def current(config: ZenConfig, publishing: bool = False) -> Identity | None:
    """The caller's identity, from the first source that gives one (module docstring); None without any.
    ``publishing``: the caller publishes next, which a deployed Zen's Pub/Sub allows only with Application
    Default Credentials: without them, google-auth's ``DefaultCredentialsError`` now (``zen.cli.kit`` tells
    it in one line), not after a second search."""
    if token := os.environ.get("ZEN_ID_TOKEN"):
        return _given(token.strip())
    if endpoint := os.environ.get("ZEN_IDENTITY_ENDPOINT"):
        return from_local_stack(endpoint, os.environ.get("ZEN_AS") or os.environ.get("USER") or getpass.getuser(),
                                config)
    if os.environ.get("PUBSUB_EMULATOR_HOST"):  # a stand-in or emulator: no Google identity to prove there
        return None
    return _application_default(config, publishing) or _gcloud(config)


def attributes(identity: Identity | None) -> dict[str, str]:
    """The message attributes carrying ``identity``'s token (none without one)."""
    from zen.adapters.submitters import auth_attributes

    return auth_attributes(identity.token) if identity is not None else {}


def describe(identity: Identity | None) -> str:
    return (f"as {identity.email} ({identity.source})" if identity is not None else
            "with no identity (no ZEN_ID_TOKEN, Application Default Credentials or gcloud login): a Zen that "
            "requires one refuses it (zen rejected)")

