"""Google's OAuth token endpoint on a local port (a credentials' ``token_uri``), for tests of what Zen makes of
google-auth's refreshes: each POST is answered by ``answer()``, a status and a JSON body, or None to close the
connection unanswered (google-auth raises TransportError, as with no network)."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any, Callable


class TokenEndpoint:
    def __init__(self, answer: Callable[[], tuple[int, dict[str, Any]] | None]) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                said = answer()
                if said is None:
                    self.close_connection = True
                    return
                body = json.dumps(said[1]).encode()
                self.send_response(said[0])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.uri = f"http://127.0.0.1:{self.server.server_address[1]}/token"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
