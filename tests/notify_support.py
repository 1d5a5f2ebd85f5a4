"""What the notifier's tests share: a webhook sink (a small HTTP server that records what it receives and
answers as told: a status, or no answer until the caller gave up), a Zen whose notifier reads its URLs
from the Secret Manager stand-in through the official client, and a name made to resolve where a test says."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from zen.core.config import ZenConfig

TOKEN = "s3cr3t-T0K3N-9f8e7d"  # in every sink URL: what must appear in no row and no log line


class WebhookSink:
    """Records each POST (path, headers, JSON body); answers the next ``script`` entries in turn (an int: that
    status; "hang": hold the request ``hang_s`` then answer 200), then 200."""

    def __init__(self, hang_s: float = 3.0):
        self.received: list[dict[str, Any]] = []
        self.script: list[int | str] = []
        self.hang_s = hang_s
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with sink._lock:
                    answer = sink.script.pop(0) if sink.script else 200
                    sink.received.append({"path": self.path, "headers": dict(self.headers),
                                          "body": json.loads(body), "answer": answer})
                if answer == "hang":
                    time.sleep(sink.hang_s)
                    answer = 200
                try:
                    self.send_response(int(answer))
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the notifier gave up waiting (a "hang"): nobody reads the answer

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{name}/{TOKEN}"

    def on(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.received if r["path"].startswith(f"/{name}/")]

    def __enter__(self) -> "WebhookSink":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def notifying_config(config: ZenConfig, timeout_s: float = 1.0) -> ZenConfig:
    """``config`` with its jobs allowed to name this project's zen-notify-* secrets, and a short POST timeout."""
    return ZenConfig.model_validate({
        **config.model_dump(), "secrets": [f"projects/{config.project}/secrets/zen-notify-*/versions/*"],
        "notifications": {"timeout_s": timeout_s}})


def secret(config: ZenConfig, name: str) -> str:
    return f"projects/{config.project}/secrets/{name}"


def resolving(monkeypatch: Any, host: str, address: str) -> None:
    """``host`` resolves to ``address`` alone for the rest of the test (every other name as it does)."""
    real = socket.getaddrinfo

    def getaddrinfo(name: str, port: int, *args: Any, **kwargs: Any) -> Any:
        if name == host:
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]
        return real(name, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
