"""The notifier's way out (``zen.jobs.notifications``): one JSON POST with the standard library, and the
read of a URL's secret, each failure translated into ``DeliveryRefused`` (never again) or
``DeliveryFailed`` (try again later) with a text that never quotes the URL, the host or the secret's value:
exception texts are not passed on, only what kind of failure it was.

Redirects are not followed (a 3xx is the endpoint's refusal): a URL posts where it says.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import ssl
import threading
import urllib.error
import urllib.request
from typing import Any, Callable

from zen.adapters.secret_manager import SecretDenied, SecretUnavailable, secret_reader
from zen.core.notify import DeliveryFailed, DeliveryRefused, NoAnswer

USER_AGENT = "zen-notifier/1"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx


class _PrivateAddress(OSError):
    """The host resolved to an address that is not public (raised while connecting)."""


def _public_connection(address: tuple[str, int], timeout: float | None = None, source_address: Any = None,
                       **_: Any) -> socket.socket:
    """``socket.create_connection`` to an address the host resolves to only if every one is public: checked
    and connected to in one step, so a name cannot resolve to a public address for a check and to a private
    one for the connection (DNS rebinding). TLS then checks the certificate against the host's name. The addresses
    are tried in the resolver's order, as ``socket.create_connection`` tries them: the next when one cannot be
    reached (an IPv6 address where the network has no IPv6 route)."""
    host, port = address
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if any(not ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_global for info in found):
        raise _PrivateAddress("private address")
    failure: OSError = OSError("its host resolves to no address")
    for family, kind, proto, _name, peer in found:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(peer)
            return sock
        except OSError as exc:
            sock.close()
            failure = exc
        except BaseException:
            sock.close()
            raise
    raise failure


_posting = threading.local()  # the deadline of the POST this thread makes


class _Deadline:
    """One POST's whole time. urllib's ``timeout`` bounds each connect and read, not the POST: an endpoint
    that answers a byte at a time held it (and the targets after it, and the claim's hold) for as long as
    it liked. At the deadline the POST's connection is shut down, which ends a read under way. (A TLS
    handshake, before the connection is watched, is bounded per read only.)"""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.expired = seconds, False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "_Deadline":
        _posting.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()
        _posting.deadline = None

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Watched:
    """A connection whose socket its POST's deadline may shut down."""

    sock: socket.socket

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        if (deadline := getattr(_posting, "deadline", None)) is not None:
            deadline.watch(self.sock)


class _WatchedHTTPConnection(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, http.client.HTTPSConnection):
    pass


class _PublicHTTPSConnection(_WatchedHTTPSConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # on each connection: http.client's __init__ sets its own there, which hides one set on the class
        self._create_connection = _public_connection


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_WatchedHTTPConnection, req)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    connection: type[http.client.HTTPSConnection] = _WatchedHTTPSConnection

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(self.connection, req, context=self._context)  # type: ignore[attr-defined]


class _PublicHTTPSHandler(_WatchedHTTPSHandler):
    connection = _PublicHTTPSConnection


class HttpPoster:
    """POSTs JSON; returns the answer's status code, or raises ``DeliveryFailed`` when there is none.
    ``public_only``: an https URL's host must resolve to public addresses only, checked as it is connected to
    (the URLs users keep in secrets), and so connected to directly, whatever proxy the environment names
    (``HTTPS_PROXY``: through it, the address checked would be the proxy's); the operator's own email API is not
    held to it."""

    def __init__(self, public_only: bool = True) -> None:
        handlers: list[Any] = [_NoRedirects(), _WatchedHTTPHandler(),
                               _PublicHTTPSHandler() if public_only else _WatchedHTTPSHandler()]
        if public_only:  # no proxy: the address checked is the webhook's own, the one connected to
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    def post(self, url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float) -> int:
        """Within ``timeout_s`` in all (``_Deadline``). Once the status came, it is the answer: a body cut
        short (the deadline, a reset) changes nothing."""
        data = json.dumps(body).encode()
        try:
            request = urllib.request.Request(url, data=data, method="POST", headers={
                "Content-Type": "application/json", "User-Agent": USER_AGENT, **headers})
        except ValueError:  # no scheme: it was raised past the notifier ("the notifier failed while sending")
            raise DeliveryRefused("its URL is malformed (no http(s) scheme)") from None
        with _Deadline(timeout_s) as deadline:
            try:
                return self._post(request, timeout_s)
            except DeliveryFailed:
                if deadline.expired:
                    raise NoAnswer(f"no answer within {timeout_s:g} s") from None
                raise

    def _post(self, request: urllib.request.Request, timeout_s: float) -> int:
        try:
            with self._opener.open(request, timeout=timeout_s) as response:
                try:
                    response.read(65536)
                except (OSError, ValueError, http.client.HTTPException):
                    pass  # the status is in
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, _PrivateAddress):
                raise DeliveryRefused("its URL's host resolves to a private address: give a public https URL") from None
            raise _failure(exc.reason, timeout_s) from None
        except (OSError, ValueError) as exc:  # a read timing out, a connection reset midway, a malformed URL
            raise _failure(exc, timeout_s) from None
        except http.client.HTTPException:  # not HTTP (another protocol on the port), a body cut short, ...
            raise DeliveryFailed("its answer was not HTTP") from None


def _failure(reason: object, timeout_s: float) -> DeliveryFailed:
    """``NoAnswer`` when the endpoint gave none (no connection, a reset, nothing within the time): a failed TLS
    handshake or an unusable URL is an endpoint that answers, wrongly."""
    if isinstance(reason, OSError) and not isinstance(reason, ssl.SSLError):
        return NoAnswer(_why(reason, timeout_s))
    return DeliveryFailed(_why(reason, timeout_s))


def _why(reason: object, timeout_s: float) -> str:
    """What kind of failure, never its text (which may quote the host or the URL)."""
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer within {timeout_s:g} s"
    if isinstance(reason, socket.gaierror):
        return "its host name does not resolve"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, ConnectionResetError):
        return "connection reset"
    if isinstance(reason, ssl.SSLError):
        return "TLS failed"
    if isinstance(reason, ValueError):
        return "its URL cannot be used"
    return f"no answer ({type(reason).__name__})"


def notify_secret_reader(read: Callable[[str], bytes] | None = None) -> Callable[[str], str]:
    """Reads a secret version as text through Secret Manager (``zen.adapters.secret_manager``), built at
    the first read: ``DeliveryRefused`` when the notifier may never read it, ``DeliveryFailed`` when the
    service did not answer."""
    read = read or secret_reader(account="the notifier's service account (zen-fn-notify)")

    def text(reference: str) -> str:
        try:
            value = read(reference)
        except SecretDenied as exc:
            raise DeliveryRefused(f"its secret: {exc}") from None
        except SecretUnavailable as exc:
            raise DeliveryFailed(f"its secret: {exc}") from None
        try:
            return value.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise DeliveryRefused("its secret is not UTF-8 text") from None

    return text
