"""A local webhook sink: where the local stack's notifier posts (``zen.jobs.notifications``), standing in for
Slack or a team's webhook. Each POST is appended to a JSON-lines file (path, the ``Zen-Delivery`` header,
the JSON body) and answered by its path: ``/status/<code>/...`` answers that code (try 500 to see the
notifier retry and the event end in ``zen-job-events-dead-letter``, 404 to see it refused), ``/slow/...``
answers after 30 s (past the notifier's timeout), anything else 200.

The local stack seeds its Secret Manager with secrets holding this sink's URLs (``zen_dev.local.stack``;
docs/how-to/notifications.md, "Try it locally").

``python -m zen_dev.local.webhook_sink --port N --out notifications.jsonl``
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SLOW_S = 30.0


def make_server(port: int, out: Path, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            status = 200
            if match := re.match(r"^/status/(\d{3})/", self.path):
                status = int(match.group(1))
            elif self.path.startswith("/slow/"):
                time.sleep(SLOW_S)
            record = {"at": datetime.now(timezone.utc).isoformat(), "path": self.path, "answer": status,
                      "delivery": self.headers.get("Zen-Delivery"), "body": body}
            with lock, out.open("a") as sink:
                sink.write(json.dumps(record) + "\n")
            print(f"{record['at']} {self.path} -> {status}: {json.dumps(body)[:300]}", flush=True)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m zen_dev.local.webhook_sink", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the JSON-lines file each POST is appended to")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    server = make_server(args.port, args.out)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:  # the line too: a Ctrl-C as soon as it is read may land within its print
        print(f"webhook sink on 127.0.0.1:{args.port}, writing {args.out}", flush=True)
        server.serve_forever()
    except KeyboardInterrupt:  # Ctrl-C: stopped quietly, as the other stand-ins stop
        pass


if __name__ == "__main__":
    main()
