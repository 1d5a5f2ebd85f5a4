"""A Secret Manager stand-in: a local gRPC server speaking ``AccessSecretVersion`` of
``google.cloud.secretmanager.v1`` to the official client (``zen.adapters.secret_manager`` with
``ZEN_SECRETS_ENDPOINT``), the only call the agent makes. Any other call answers UNIMPLEMENTED.

Secrets are given as a dict (or YAML: ``secrets: {projects/P/secrets/NAME: VALUE or [V1, V2, ...]}``; a regional
secret by its full name, ``projects/P/locations/L/secrets/NAME``, served here for every location), each
value a version (1, 2, ...; ``latest`` is the last, whatever its state: a version ``set_state`` disabled or
destroyed answers FAILED_PRECONDITION, ``latest`` too when it is that one, as the real service does); ``granted``
(fnmatch patterns of secret names) is what the caller's service account may read: any other name is
PERMISSION_DENIED, whether or not it exists, as the real service answers. ``fail_next(code, n, message)`` makes the next n calls fail with ``code`` (UNAVAILABLE:
an outage; PERMISSION_DENIED with the service's words for a 403 that is not IAM's); ``calls`` records the names
asked for.

``python -m zen_dev.local.secret_manager --port N [--file secrets.yaml] [--secret NAME=VALUE]...``
"""

from __future__ import annotations

import argparse
import threading
from concurrent.futures import ThreadPoolExecutor
from fnmatch import fnmatchcase
from pathlib import Path

import google_crc32c
import grpc
import yaml
from google.cloud.secretmanager_v1 import types as T

from zen.logs import setup_logging
from zen_dev.local.until_stopped import stop_signals_heard

SERVICE = "google.cloud.secretmanager.v1.SecretManagerService"
DEFAULT_PORT = 8089


class SecretStore:
    """The secrets served, what the caller may read, and the errors to inject."""

    def __init__(self, secrets: dict[str, str | list[str]] | None = None, granted: list[str] | None = None):
        self._lock = threading.Lock()
        self.versions: dict[str, list[bytes]] = {}
        self.granted = granted  # None: every secret
        self.calls: list[str] = []
        self.states: dict[tuple[str, int], str] = {}  # (secret, version) -> DISABLED or DESTROYED; else ENABLED
        self._failures: list[tuple[grpc.StatusCode, str]] = []
        for name, value in (secrets or {}).items():
            self.put(name, value)

    def put(self, secret: str, value: str | list[str]) -> None:
        """Add ``secret``'s versions (a value, or several in order)."""
        values = [value] if isinstance(value, str) else list(value)
        with self._lock:
            self.versions.setdefault(secret, []).extend(v.encode() for v in values)

    def set_state(self, secret: str, version: int, state: str) -> None:
        """Put version ``version`` of ``secret`` in ``state`` (DISABLED, DESTROYED, or ENABLED again): a version
        not ENABLED answers FAILED_PRECONDITION, naming it, as the real service does (``latest`` too, when it is)."""
        with self._lock:
            self.states[(secret, version)] = state

    def fail_next(self, code: grpc.StatusCode, count: int = 1, message: str = "injected failure") -> None:
        with self._lock:
            self._failures += [(code, message)] * count

    def access(self, name: str) -> tuple[str, bytes] | tuple[grpc.StatusCode, str]:
        """(the version's full name, its payload), or (an error code, its message)."""
        with self._lock:
            self.calls.append(name)
            if self._failures:
                return self._failures.pop(0)
            secret, _, version = name.partition("/versions/")
            if self.granted is not None and not any(fnmatchcase(secret, pattern) for pattern in self.granted):
                return (grpc.StatusCode.PERMISSION_DENIED,
                        f"Permission 'secretmanager.versions.access' denied for resource '{name}' (or it may not exist).")
            versions = self.versions.get(secret)
            number = len(versions or []) if version == "latest" else int(version) if version.isdigit() else 0
            if not versions or not 1 <= number <= len(versions):
                return grpc.StatusCode.NOT_FOUND, f"Secret Version [{name}] not found."
            if (state := self.states.get((secret, number), "ENABLED")) != "ENABLED":
                return (grpc.StatusCode.FAILED_PRECONDITION,
                        f"Secret Version [{secret}/versions/{number}] is in {state} state.")
            return f"{secret}/versions/{number}", versions[number - 1]


def handlers(store: SecretStore) -> grpc.GenericRpcHandler:
    def access(request: T.AccessSecretVersionRequest, context: grpc.ServicerContext) -> T.AccessSecretVersionResponse:
        found = store.access(request.name)
        if isinstance(found[0], grpc.StatusCode):
            context.abort(found[0], str(found[1]))
        name, data = found
        assert isinstance(name, str) and isinstance(data, bytes)
        return T.AccessSecretVersionResponse(
            name=name, payload=T.SecretPayload(data=data, data_crc32c=google_crc32c.value(data)))

    return grpc.method_handlers_generic_handler(SERVICE, {
        "AccessSecretVersion": grpc.unary_unary_rpc_method_handler(
            access, request_deserializer=T.AccessSecretVersionRequest.deserialize,
            response_serializer=T.AccessSecretVersionResponse.serialize),
    })


class SecretManagerStandIn:
    """The gRPC server around a ``SecretStore``; ``endpoint`` is what ``ZEN_SECRETS_ENDPOINT`` takes."""

    def __init__(self, store: SecretStore | None = None, host: str = "127.0.0.1", port: int = 0):
        self.store = store or SecretStore()
        self.host = host
        self._requested_port = port
        self._server: grpc.Server | None = None
        self.port: int | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "SecretManagerStandIn":
        server = grpc.server(ThreadPoolExecutor(max_workers=8, thread_name_prefix="secrets-standin"),
                             handlers=[handlers(self.store)])
        port = server.add_insecure_port(f"{self.host}:{self._requested_port}")
        if not port:
            raise RuntimeError(f"could not bind {self.host}:{self._requested_port}")
        server.start()
        self._server, self.port = server, port
        return self

    def stop(self, grace: float | None = None) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace).wait()

    def __enter__(self) -> "SecretManagerStandIn":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def load(path: Path) -> SecretStore:
    """A store from YAML: ``secrets:`` (secret name -> value or list of values) and, optionally, ``granted:``."""
    data = yaml.safe_load(path.read_text()) or {}
    return SecretStore({str(k): v for k, v in (data.get("secrets") or {}).items()}, data.get("granted"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m zen_dev.local.secret_manager",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--file", type=Path, help="YAML with secrets: and granted:")
    parser.add_argument("--secret", action="append", default=[], metavar="NAME=VALUE",
                        help="a secret (projects/P/secrets/NAME) and its one version's value; repeatable")
    args = parser.parse_args(argv)
    setup_logging()
    store = load(args.file) if args.file else SecretStore()
    for item in args.secret:
        name, _, value = item.partition("=")
        store.put(name, value)
    with stop_signals_heard() as wait_for_stop:
        standin = SecretManagerStandIn(store, args.host, args.port).start()
        print(f"ZEN_SECRETS_ENDPOINT={standin.endpoint}", flush=True)
        wait_for_stop()
        standin.stop(1.0)


if __name__ == "__main__":
    main()
