"""Reading a job's secrets: one secret version's payload through the official Secret Manager client
(``AccessSecretVersion``), with the client's errors translated into the two kinds the agent acts on
(``SecretDenied``: the VM may never read it; ``SecretUnavailable``: the service's or the network's fault).

``ZEN_SECRETS_ENDPOINT`` (``host:port``) points the client at a local stand-in (``zen_dev.local.secret_manager``)
over an insecure channel with anonymous credentials, for every location. Without it, a regional secret's version
(``projects/P/locations/L/secrets/...``) is read through a client of its location's endpoint
(``secretmanager.L.rep.googleapis.com``: the global endpoint refuses regional names), one client per location.
The client library is imported only when a client is built: of the functions, only the notifier reads secrets
(its endpoints' URLs: ``zen.adapters.webhooks``), and requirements-functions.txt carries the client for it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

ENDPOINT_ENV = "ZEN_SECRETS_ENDPOINT"
CALL_TIMEOUT_S = 10.0  # one AccessSecretVersion; the agent retries an unavailable service itself
IAM_DENIAL = "Permission 'secretmanager.versions.access' denied"  # how a 403 of IAM's starts (others: ``_denied``)
_REGIONAL = re.compile(r"projects/[^/]+/locations/([^/]+)/")
# What gRPC says of a host DNS answers does not exist (NXDOMAIN): a regional endpoint of a location that is no region
# (``europe-west5``, well-formed) never will, so its read is refused, not retried as an outage (requeued over and over).
NO_SUCH_HOST = "Domain name not found"


class SecretDenied(Exception):
    """The reading service account may not read the version, or it is not there (no retry helps)."""


class SecretUnavailable(Exception):
    """Secret Manager did not answer in time or said to try again."""


class SecretTokenRefused(SecretUnavailable):
    """Secret Manager refused the reading service account's own token (401): the VM's credentials, not the job's."""


def location_of(name: str) -> str | None:
    """The location of a regional secret version's ``name``; None for a global secret's."""
    found = _REGIONAL.match(name)
    return found.group(1) if found else None


def google_client_options(location: str | None) -> dict[str, str]:
    """The client options of the client reading Google's Secret Manager: for ``location``'s regional secrets, the
    endpoint that serves them (``secretmanager.<location>.rep.googleapis.com``); none for the global secrets."""
    return {} if location is None else {"api_endpoint": f"secretmanager.{location}.rep.googleapis.com"}


def secret_client(endpoint: str | None = None, location: str | None = None) -> Any:
    """The official client: for the global secrets, or with ``location`` for that location's regional secrets
    (its regional endpoint); with ``endpoint`` (or ``ZEN_SECRETS_ENDPOINT``), one talking plain gRPC to a local
    stand-in with anonymous credentials, whatever the location."""
    from google.cloud import secretmanager

    endpoint = endpoint or os.environ.get(ENDPOINT_ENV)
    if not endpoint:
        return secretmanager.SecretManagerServiceClient(client_options=google_client_options(location))
    import grpc  # type: ignore[import-untyped]  # (no stubs; only its insecure channel is used)
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.secretmanager_v1.services.secret_manager_service.transports.grpc import (
        SecretManagerServiceGrpcTransport)

    def insecure(host: str, **_: Any) -> Any:
        return grpc.insecure_channel(host)

    def transport(**options: Any) -> SecretManagerServiceGrpcTransport:
        return SecretManagerServiceGrpcTransport(**{**options, "channel": insecure})

    return secretmanager.SecretManagerServiceClient(
        credentials=AnonymousCredentials(), transport=transport, client_options={"api_endpoint": endpoint})


def secret_reader(client_factory: Callable[[str | None], Any] = lambda location: secret_client(location=location),
                  account: str = "the VM's service account") -> Callable[[str], bytes]:
    """A function reading one secret version's payload; ``client_factory(location)`` builds the client of a
    location's regional secrets (None: the global ones) at the first read of one (a VM whose jobs name no secret
    never builds one)."""
    clients: dict[str | None, Any] = {}

    def read(name: str) -> bytes:
        location = location_of(name)
        if location not in clients:
            try:
                clients[location] = client_factory(location)
            except Exception as exc:  # noqa: BLE001 - no credentials, no library: the VM's fault, not the job's
                raise SecretUnavailable(f"no Secret Manager client: {exc}") from None
        return access(clients[location], name, account)

    return read


def access(client: Any, name: str, account: str = "the VM's service account") -> bytes:
    """The payload of secret version ``name``, checked against its CRC32C when the service sends one; a refusal
    names the ``account`` that needs the grant (the notifier's is not the VM's)."""
    from google.api_core import exceptions
    import google_crc32c

    try:
        response = client.access_secret_version(request={"name": name}, timeout=CALL_TIMEOUT_S, retry=None)
    except exceptions.PermissionDenied as exc:
        raise SecretDenied(_denied(exc.message, account)) from None
    except exceptions.NotFound:
        raise SecretDenied("not found (no such secret or version)") from None
    except exceptions.FailedPrecondition as exc:  # a disabled or destroyed version
        raise SecretDenied(f"cannot be read: {exc.message}") from None
    except exceptions.InvalidArgument as exc:
        raise SecretDenied(f"refused: {exc.message}") from None
    except exceptions.ServiceUnavailable as exc:
        if (location := location_of(name)) is not None and NO_SUCH_HOST in (exc.message or ""):
            raise SecretDenied(f"no Secret Manager endpoint for location {location} (secretmanager.{location}"
                               f".rep.googleapis.com does not exist: {NO_SUCH_HOST}): is {location} a region whose "
                               "regional secrets the reference means?") from None
        raise SecretUnavailable(f"Secret Manager unavailable: {exc.message or type(exc).__name__}") from None
    except (exceptions.DeadlineExceeded, exceptions.InternalServerError,
            exceptions.TooManyRequests, exceptions.Unknown, exceptions.Aborted, exceptions.Cancelled) as exc:
        raise SecretUnavailable(f"Secret Manager unavailable: {exc.message or type(exc).__name__}") from None
    except exceptions.Unauthenticated as exc:  # (401: the VM's own token, refused or expiring: the VM's, as staging's)
        raise SecretTokenRefused(f"Secret Manager unavailable: {exc.message or type(exc).__name__}") from None
    except exceptions.GoogleAPICallError as exc:
        raise SecretDenied(f"refused: {exc.message or type(exc).__name__}") from None
    payload = response.payload
    if "data_crc32c" in payload and google_crc32c.value(payload.data) != payload.data_crc32c:
        raise SecretUnavailable("its payload arrived corrupted (CRC32C mismatch)")
    return bytes(payload.data)


def _denied(said: str | None, account: str) -> str:
    """Why a read was refused with 403: an IAM denial names the role ``account`` needs; any other refusal (the Secret
    Manager API disabled in the project, the VM's access scopes, an organization's VPC Service Controls) is given in
    the service's words, since granting that role would not help."""
    if not said or said.startswith(IAM_DENIAL):
        return f"permission denied ({account} needs roles/secretmanager.secretAccessor on it)"
    return f"permission denied: {said}"
