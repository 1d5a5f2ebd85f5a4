"""Identity tokens in tests: a local issuer (``zen_dev.local.compute.issuer``: what Google's metadata server
and sign-in are to VMs and people) and an HTTP server of its certificates, as Google's certificate URL
gives them. Import the fixtures ``issuer`` and ``certs`` into a test module to use them."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from zen_dev.local.compute.issuer import TokenIssuer


class CertsServer:
    """Serves ``body`` (certificates JSON) with ``cache_control`` at ``url``; counts the requests."""

    def __init__(self, body: bytes, cache_control: str):
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                served.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Cache-Control", cache_control)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/v1/certs"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @classmethod
    def of(cls, issuer: TokenIssuer, max_age_s: int = 3600) -> "CertsServer":
        return cls(json.dumps(issuer.certs()).encode(), f"public, max-age={max_age_s}")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def issuer():
    return TokenIssuer()  # one key per module: making an RSA key takes a moment


@pytest.fixture
def certs(issuer):
    server = CertsServer.of(issuer)
    yield server
    server.close()
