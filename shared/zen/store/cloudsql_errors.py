"""What the Cloud SQL connector's failures to connect mean for Zen (``zen.store.connect.cloudsql_connect_factory``).

Before its first connection to an instance, and again as its certificate nears expiry (lazy refresh: at connect
time), the connector (1.23) refreshes its Google access token through google-auth and asks the Cloud SQL Admin API
for the instance's addresses and an ephemeral certificate (``google.cloud.sql.connector.client``). What fails there
is neither a driver error nor an ``OSError``: google-auth's ``RefreshError``/``TransportError``, aiohttp's
``ClientResponseError`` (``raise_for_status`` on the API's answer) or ``ClientConnectionError``, or one of the
connector's own exceptions. Each is read here once:

- transient (``TransientError``: the message is redelivered, the failure logged as an outage, a tick's per-cluster
  loops go on): the token could not be fetched (the metadata server or the token endpoint down, or answering a
  failure status: google-auth's ``TransportError``, or a ``RefreshError`` caused by one or marked ``retryable``); the
  Admin API answering 5xx (after the connector's own five tries, ``refresh_utils.retry_50x``), 429 (its quota: the
  connector does not retry it) or 408, or unreachable (aiohttp's connection errors; those that are ``OSError`` were
  transient already); the connector's ``CloudSQLConnectionError`` (a certificate missing from the API's answer,
  the SQL Data Service busy), ``RefreshNotValidError`` (a refresh that came back expired) and ``CacheClosedError``
  (the connection info dropped after a failed connect while another connect used it): the next refresh asks again.
- permanent (``ConfigError``, naming the fix; a retry answers the same until a person acts): the Admin API's 403
  (the account Zen runs as lacks ``roles/cloudsql.client``, or the API is not enabled in the project) and 404 (no
  such instance: ``ZEN_CLOUDSQL_INSTANCE``), any other 4xx; ``CloudSQLIPTypeError`` (the instance has no address of
  ``ZEN_CLOUDSQL_IP_TYPE``'s kind); ``AutoIAMAuthNotSupported`` and ``IncompatibleDriverError`` (the instance is no
  Cloud SQL for PostgreSQL one); ``TLSVersionError`` (an OpenSSL without TLS 1.3, which IAM authentication needs).
- left as raised: a ``RefreshError`` that is neither (Google refused the credentials: a revoked key, an expired
  login; its own words say so, and the CLI tells its user what to run: ``zen.cli.kit.credentials_problem``), and
  anything else (a bug: its traceback is wanted).

google-auth and aiohttp are imported only when an error is read, and only if installed: the agent ships neither.
"""

from __future__ import annotations

from zen.core.errors import ConfigError, TransientError
from zen.core.text import first_line

# Admin API statuses a later try may not meet: a server fault, its quota (429), a request that timed out (408).
_TRANSIENT_STATUSES = frozenset({408, 429})


def connector_error(exc: BaseException, instance: str) -> Exception | None:
    """What to raise in ``exc``'s place (from it), for a failure of the Cloud SQL connector to connect to
    ``instance``; ``None``: ``exc`` itself (a driver error or ``OSError``, classified as any other, or one left
    as raised: the module docstring)."""
    return _auth_error(exc) or _admin_api_error(exc, instance) or _connector_own_error(exc, instance)


def _auth_error(exc: BaseException) -> Exception | None:
    try:
        from google.auth.exceptions import RefreshError, TransportError
    except ImportError:
        return None
    if isinstance(exc, TransportError) or (isinstance(exc, RefreshError) and (
            exc.retryable or isinstance(exc.__cause__, TransportError))):
        return TransientError(f"the Cloud SQL connector could not get a Google access token (the metadata server "
                              f"or the token endpoint failed): {first_line(exc)}")
    return None


def _admin_api_error(exc: BaseException, instance: str) -> Exception | None:
    try:
        from aiohttp import ClientConnectionError, ClientPayloadError, ClientResponseError
    except ImportError:
        return None
    if isinstance(exc, ClientResponseError):
        said = f"{exc.status} {exc.message}".strip()
        if exc.status >= 500 or exc.status in _TRANSIENT_STATUSES:
            return TransientError(f"the Cloud SQL Admin API failed for {instance} ({said})")
        if exc.status == 403:
            return ConfigError(f"the Cloud SQL Admin API refused {instance} ({said}): grant the service account Zen "
                               "runs as roles/cloudsql.client and roles/cloudsql.instanceUser, and enable "
                               "sqladmin.googleapis.com in the instance's project")
        if exc.status == 404:
            return ConfigError(f"the Cloud SQL Admin API has no instance {instance} ({said}): set "
                               "ZEN_CLOUDSQL_INSTANCE to the instance's connection name, PROJECT:REGION:INSTANCE")
        return ConfigError(f"the Cloud SQL Admin API refused {instance} ({said})")
    if isinstance(exc, (ClientConnectionError, ClientPayloadError)):
        return TransientError(f"the Cloud SQL Admin API could not be reached for {instance}: "
                              f"{type(exc).__name__}: {first_line(exc)}")
    return None


def _connector_own_error(exc: BaseException, instance: str) -> Exception | None:
    try:
        from google.cloud.sql.connector import exceptions as connector
    except ImportError:
        return None
    if isinstance(exc, (connector.CloudSQLConnectionError, connector.RefreshNotValidError,
                        connector.CacheClosedError)):
        return TransientError(f"the Cloud SQL connector could not connect to {instance}: {first_line(exc)}")
    if isinstance(exc, connector.CloudSQLIPTypeError):
        return ConfigError(f"{first_line(exc)} ({instance}): set ZEN_CLOUDSQL_IP_TYPE to a kind of address the "
                           "instance has (PRIVATE, PUBLIC or PSC), or give the instance one")
    if isinstance(exc, (connector.AutoIAMAuthNotSupported, connector.IncompatibleDriverError)):
        return ConfigError(f"{instance} is not a Cloud SQL for PostgreSQL instance, which Zen needs "
                           f"(ZEN_CLOUDSQL_INSTANCE): {first_line(exc)}")
    if isinstance(exc, connector.TLSVersionError):
        return ConfigError(f"IAM database authentication needs TLS 1.3, which this Python's OpenSSL lacks: "
                           f"{first_line(exc)}")
    return None
