"""A minimal Cloud Logging stand-in for tests: the HTTP/JSON ``v2/entries:write`` and
``v2/entries:list`` calls the official client makes, with entries kept in memory.

Filters: the conjunctions Zen writes (``field="value" AND ... AND jsonPayload.seq>N AND
timestamp>="..."``), where a field is ``logName``, ``labels.K`` or ``jsonPayload.K``; anything else
is answered 400, as a typo would be by the real service. ``orderBy`` ``timestamp asc`` (the default) or ``timestamp desc``.

Read quota (``LoggingStandIn(list_quota=(N, WINDOW_S))``): an ``entries:list`` request after N answered
ones within the last WINDOW_S seconds is answered 429 RESOURCE_EXHAUSTED, as the real service does
past the project's read quota (``throttled`` counts them).
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_CLAUSE = re.compile(r'^(logName|timestamp|labels\.\w+|jsonPayload\.\w+)\s*(=|>=|<=|>)\s*(".*"|-?\d+)$')
_NOT = re.compile(r'^NOT \((.*)\)$')
_SEVERITY_NAMES = {0: "DEFAULT", 100: "DEBUG", 200: "INFO", 300: "NOTICE", 400: "WARNING", 500: "ERROR",
                   600: "CRITICAL", 700: "ALERT", 800: "EMERGENCY"}


@functools.lru_cache(maxsize=256)  # one query is matched against every entry
def _clauses(query: str) -> tuple[str, ...]:
    """The query's clauses joined by AND at the top level (a NOT (...) group is one clause)."""
    out, depth, start = [], 0, 0
    for i, char in enumerate(query):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and query.startswith(" AND ", i):
            out.append(query[start:i])
            start = i + len(" AND ")
    return tuple(part.strip() for part in [*out, query[start:]] if part.strip())


def _value(entry: dict, field: str):
    if field in ("logName", "timestamp"):
        return entry.get(field)
    head, key = field.split(".", 1)
    return (entry.get(head) or {}).get(key)


def matches(entry: dict, query: str) -> bool:
    for clause in _clauses(query):
        if (negated := _NOT.match(clause)) is not None:
            if matches(entry, negated.group(1)):
                return False
            continue
        found = _CLAUSE.match(clause)
        if not found:
            raise ValueError(f"unsupported filter clause: {clause}")
        field, op, literal = found.groups()
        value = _value(entry, field)
        if op == "=":
            if value != json.loads(literal):
                return False
        elif field == "timestamp":
            if value is None or _time(value) < _time(json.loads(literal)):
                return False
        elif op == "<=":
            if value is None or float(value) > float(literal):
                return False
        elif value is None or float(value) <= float(literal):
            return False
    return True


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class LoggingStandIn:
    def __init__(self, list_quota: tuple[int, float] | None = None):
        self.entries: list[dict] = []
        self.writes = 0
        self.lists = 0  # entries:list requests answered
        self.throttled = 0  # entries:list requests refused (429)
        self._quota = list_quota
        self._listed_at: list[float] = []
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                path = self.path.split("?", 1)[0]
                try:
                    if path == "/v2/entries:write":
                        answer = standin.write(body)
                    elif path == "/v2/entries:list":
                        if not standin.take_list_quota():
                            return self._send(429, {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
                                                              "message": "Quota exceeded for read requests"}})
                        answer = standin.list(body)
                    else:
                        return self._send(404, {"error": {"code": 404, "message": self.path}})
                except ValueError as exc:
                    return self._send(400, {"error": {"code": 400, "message": str(exc), "status": "INVALID_ARGUMENT"}})
                self._send(200, answer)

            def _send(self, code: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def write(self, body: dict) -> dict:
        with self._lock:
            self.writes += 1
            for entry in body.get("entries", []):
                entry = dict(entry)
                entry.setdefault("logName", body.get("logName"))
                entry.setdefault("resource", body.get("resource"))
                entry["labels"] = {**(body.get("labels") or {}), **(entry.get("labels") or {})}
                if isinstance(entry.get("severity"), int):  # the enum's number, stored by its name
                    entry["severity"] = _SEVERITY_NAMES.get(entry["severity"], "DEFAULT")
                self.entries.append(entry)
        return {}

    def take_list_quota(self) -> bool:
        with self._lock:
            if self._quota is not None:
                most, window = self._quota
                now = time.monotonic()
                self._listed_at = [t for t in self._listed_at if now - t < window]
                if len(self._listed_at) >= most:
                    self.throttled += 1
                    return False
                self._listed_at.append(now)
            self.lists += 1
            return True

    def list(self, body: dict) -> dict:
        query = body.get("filter", "")
        with self._lock:
            found = [e for e in self.entries if matches(e, query)]
        found.sort(key=lambda e: e.get("timestamp", ""), reverse=body.get("orderBy") == "timestamp desc")
        start = int(body.get("pageToken") or 0)
        size = int(body.get("pageSize") or 50)
        page = found[start:start + size]
        answer: dict = {"entries": page}
        if start + size < len(found):
            answer["nextPageToken"] = str(start + size)
        return answer

    def __enter__(self) -> "LoggingStandIn":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
