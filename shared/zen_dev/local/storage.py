"""A Cloud Storage stand-in: the part of the JSON API the official client uses to stage a job's inputs
and upload its outputs, objects in memory. Point the client at it with
``STORAGE_EMULATOR_HOST=http://HOST:PORT``; run alone with ``python -m zen_dev.local.storage --port N
--bucket NAME[=LOCATION]``. What it serves and how it answers: docs/reference/simulator.md."""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
import json
import re
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

import google_crc32c

_REASONS = {400: "invalid", 401: "required", 403: "forbidden", 404: "notFound", 409: "conflict", 412: "conditionNotMet", 416: "requestedRangeNotSatisfiable",
            429: "rateLimitExceeded", 500: "backendError", 503: "backendError"}


class ApiError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class StoredObject:
    data: bytes
    content_type: str
    generation: int
    created: str
    crc32c: str = field(init=False)
    md5: str = field(init=False)

    def __post_init__(self):
        self.crc32c = base64.b64encode(google_crc32c.value(self.data).to_bytes(4, "big")).decode()
        self.md5 = base64.b64encode(hashlib.md5(self.data).digest()).decode()


@dataclass
class Hold:
    """Requests held in the stand-in (for tests of what races an upload or a download): the first
    ``what`` request (``store``: an upload, its bytes received, before it is stored; ``read``: a media
    download, before the object is looked up) of an object whose name contains ``part`` waits, with
    ``reached`` set, until ``release`` is set (60 s at most); ``after``: that many such requests pass first."""

    part: str
    what: str
    after: int = 0
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class StorageState:
    """Buckets and their objects; every method is safe across the server's threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self.buckets: dict[str, dict[str, StoredObject]] = {}
        self.locations: dict[str, str] = {}
        self.placements: dict[str, list[str]] = {}  # a configurable dual-region's two regions (customPlacementConfig)
        self._generations = itertools.count(1_700_000_000_000_000)
        self.uploads: dict[str, dict] = {}  # resumable sessions: upload_id -> bucket, name, type, data
        self.finished: dict[str, dict] = {}  # resumable uploads done: upload_id -> the answer (no bytes: finish)
        self.downloads: Counter[str] = Counter()  # "bucket/name" -> media reads (what a warm cache saves)
        self._holds: list[Hold] = []
        self._lost: list[str] = []  # lose_answer
        self.answers_lost = 0
        self._outages: list[list] = []  # outage: [part, seconds, code, its first refusal's time or None]
        self.refused = 0  # upload requests an outage answered with its error
        self._denied: list[tuple[str, int, str]] = []  # deny: (part, code, message)

    def lose_answer(self, part: str) -> None:
        """The next upload of an object whose name contains ``part`` is stored, and its answer lost: the request
        that stores it (a multipart upload, a resumable upload's last chunk) gets the connection closed instead
        of an answer, as when the network fails between Cloud Storage and the client, which tries it again."""
        with self._lock:
            self._lost.append(part)

    def answer_lost(self, name: str) -> bool:
        with self._lock:
            lost = next((part for part in self._lost if part in name), None)
            if lost is not None:
                self._lost.remove(lost)
                self.answers_lost += 1
        return lost is not None

    def finish(self, upload_id: str, resource: dict) -> None:
        """A resumable upload done: ``resource``, its object's description, answers its last chunk sent again; the
        latest 64 are kept. Not the object: each is over 8 MiB (the client's multipart limit), and a long-running
        stack held the bytes of 64 of them, deleted or replaced since (old checkpoints)."""
        with self._lock:
            self.finished[upload_id] = resource
            while len(self.finished) > 64:
                del self.finished[next(iter(self.finished))]

    def outage(self, part: str, seconds: float, code: int = 503) -> None:
        """Cloud Storage unavailable for uploads of objects whose name contains ``part``: every request of such an
        upload (a media or multipart one, a resumable one's start or chunks) is answered ``code`` from now until
        ``seconds`` after the first one so answered (``refused`` counts them), as in an outage of the service."""
        with self._lock:
            self._outages.append([part, seconds, code, None])

    def refusing(self, name: str) -> int | None:
        """The error an outage (``outage``) answers an upload of ``name`` with now, or None."""
        now = time.monotonic()
        with self._lock:
            for outage in self._outages:
                part, seconds, code, since = outage
                if part in name and (since is None or now - since < seconds):
                    outage[3] = now if since is None else since
                    self.refused += 1
                    return code
        return None

    def deny(self, part: str, code: int, message: str) -> None:
        """Every read of an object whose name contains ``part`` (its metadata, its bytes) is answered ``code`` with
        ``message`` from now on, as a missing grant (403) or a bucket's setting (400: requester pays) answers."""
        with self._lock:
            self._denied.append((part, code, message))

    def denying(self, name: str) -> None:
        with self._lock:
            denied = next(((code, message) for part, code, message in self._denied if part in name), None)
        if denied is not None:
            raise ApiError(*denied)

    def hold(self, part: str, what: str, after: int = 0) -> Hold:
        """Hold the next ``what`` (``store`` or ``read``) request of an object named ``*part*``, after ``after``
        such requests (:class:`Hold`)."""
        if what not in ("store", "read"):
            raise ValueError(f"hold what={what!r}: store or read")
        held = Hold(part, what, after)
        with self._lock:
            self._holds.append(held)
        return held

    def wait_if_held(self, name: str, what: str) -> None:
        with self._lock:
            held = next((h for h in self._holds if h.what == what and h.part in name), None)
            if held is not None and held.after > 0:  # one of the requests let through first
                held.after, held = held.after - 1, None
            if held is not None:
                self._holds.remove(held)
        if held is not None:
            held.reached.set()
            held.release.wait(60)

    def create_bucket(self, name: str, location: str = "US", data_locations: list[str] | None = None) -> None:
        with self._lock:
            if name in self.buckets:
                raise ApiError(409, f"The bucket {name} already exists.")
            self.buckets[name], self.locations[name] = {}, location.upper()
            self.placements[name] = [r.upper() for r in data_locations or ()]

    def bucket_resource(self, name: str) -> dict:
        """A bucket's metadata as Cloud Storage answers it: its location and location type (a configurable
        dual-region's location is the multi-region it lies in, its regions in ``customPlacementConfig``)."""
        location, regions = self.locations[name], self.placements.get(name)
        kind = "dual-region" if regions or location in ("NAM4", "EUR4", "EUR5", "EUR7", "EUR8", "ASIA1") else (
            "multi-region" if location in ("US", "EU", "ASIA") else "region")
        return {"kind": "storage#bucket", "name": name, "id": name, "location": location, "locationType": kind,
                "storageClass": "STANDARD", **({"customPlacementConfig": {"dataLocations": regions}} if regions else {})}

    def objects(self, bucket: str) -> dict[str, StoredObject]:
        if bucket not in self.buckets:
            raise ApiError(404, f"The specified bucket does not exist: {bucket}")
        return self.buckets[bucket]

    def put(self, bucket: str, name: str, data: bytes, content_type: str = "application/octet-stream",
            if_generation_match: str | None = None) -> StoredObject:
        """Store ``name``; with ``if_generation_match`` only if that is its live generation (0: none), else 412."""
        if not name or len(name.encode()) > 1024 or "\r" in name or "\n" in name:  # as Cloud Storage refuses them
            raise ApiError(400, "Object name is required." if not name else f"Invalid object name: {name[:64]!r}")
        with self._lock:
            if if_generation_match is not None:
                live = self.objects(bucket).get(name)
                if str(live.generation if live else 0) != if_generation_match:
                    raise ApiError(412, "At least one of the pre-conditions you specified did not hold.")
            stored = StoredObject(data, content_type, next(self._generations),
                                  datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"))
            self.objects(bucket)[name] = stored
            return stored

    def get(self, bucket: str, name: str, generation: str | None = None) -> StoredObject:
        """The live object; with ``generation`` (as ``?generation=`` gives it), only if it is that one:
        a generation no longer live is a 404, as in a bucket without versioning."""
        with self._lock:
            found = self.objects(bucket).get(name)
        if found is None or (generation is not None and generation != str(found.generation)):
            raise ApiError(404, f"No such object: {bucket}/{name}" + (f"#{generation}" if generation else ""))
        return found

    def delete(self, bucket: str, name: str, generation: str | None = None) -> None:
        with self._lock:
            found = self.objects(bucket).get(name)
            if found is None or (generation is not None and generation != str(found.generation)):
                raise ApiError(404, f"No such object: {bucket}/{name}" + (f"#{generation}" if generation else ""))
            del self.objects(bucket)[name]

    def names(self, bucket: str, prefix: str, after: str, limit: int) -> tuple[list[str], bool]:
        with self._lock:
            names = sorted(n for n in self.objects(bucket) if n.startswith(prefix) and n > after)
        return names[:limit], len(names) > limit


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args) -> None:  # quiet: the tests read their own logs
        pass

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PUT(self):
        self._serve("PUT")

    def do_DELETE(self):
        self._serve("DELETE")

    # -- plumbing --------------------------------------------------------------------------------
    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            self._route(method, url.path, query, body)
        except ApiError as exc:
            reason = _REASONS.get(exc.code, "invalid")
            self._json(exc.code, {"error": {"code": exc.code, "message": str(exc),
                                            "errors": [{"reason": reason, "message": str(exc)}]}})

    def _send(self, code: int, data: bytes = b"", content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _json(self, code: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        self._send(code, json.dumps(payload).encode(), headers=headers)

    def _resource(self, bucket: str, name: str, stored: StoredObject) -> dict:
        quoted = quote(name, safe="")
        return {"kind": "storage#object", "id": f"{bucket}/{name}/{stored.generation}", "name": name,
                "bucket": bucket, "generation": str(stored.generation), "metageneration": "1",
                "contentType": stored.content_type, "size": str(len(stored.data)), "crc32c": stored.crc32c,
                "md5Hash": stored.md5, "storageClass": "STANDARD", "timeCreated": stored.created,
                "updated": stored.created, "selfLink": f"{self.server.base_url}/storage/v1/b/{bucket}/o/{quoted}",
                "mediaLink": f"{self.server.base_url}/download/storage/v1/b/{bucket}/o/{quoted}"
                             f"?generation={stored.generation}&alt=media"}

    # -- the API ---------------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        state = self.server.state
        if method == "POST" and path == "/storage/v1/b":
            name = json.loads(body or b"{}").get("name", "")
            asked = json.loads(body or b"{}")
            state.create_bucket(name, asked.get("location", "US"), asked.get("customPlacementConfig", {}).get("dataLocations"))
            return self._json(200, state.bucket_resource(name))
        if match := re.fullmatch(r"/storage/v1/b/([^/]+)", path):
            bucket = unquote(match[1])
            state.objects(bucket)
            state.denying(f"bucket:{bucket}")  # deny("bucket:NAME", 403, ...): objects readable, its metadata not
            return self._json(200, state.bucket_resource(bucket))
        if match := re.fullmatch(r"/upload/storage/v1/b/([^/]+)/o", path):
            return self._upload(method, unquote(match[1]), query, body)
        if match := re.fullmatch(r"/storage/v1/b/([^/]+)/o", path):
            return self._list(unquote(match[1]), query)
        if match := re.fullmatch(r"(/download)?/storage/v1/b/([^/]+)/o/(.+)", path):
            bucket, name = unquote(match[2]), unquote(match[3])
            if method == "DELETE":
                state.delete(bucket, name, query.get("generation"))
                return self._send(204)
            media = query.get("alt") == "media" or bool(match[1])
            state.denying(name)
            if media:
                state.wait_if_held(name, "read")
            stored = state.get(bucket, name, query.get("generation"))
            if media:
                with state._lock:
                    state.downloads[f"{bucket}/{name}"] += 1
                return self._media(stored)
            return self._json(200, self._resource(bucket, name, stored))
        raise ApiError(404, f"{method} {path}: not served by the Cloud Storage stand-in")

    def _list(self, bucket: str, query: dict[str, str]) -> None:
        limit = min(int(query.get("maxResults") or 1000), 1000)
        names, more = self.server.state.names(bucket, query.get("prefix", ""), query.get("pageToken", ""), limit)
        items = [self._resource(bucket, name, self.server.state.get(bucket, name)) for name in names]
        payload = {"kind": "storage#objects", "items": items}
        if more:
            payload["nextPageToken"] = names[-1]
        self._json(200, payload)

    def _media(self, stored: StoredObject) -> None:
        data, code, headers = stored.data, 200, {
            "x-goog-hash": f"crc32c={stored.crc32c},md5={stored.md5}", "x-goog-generation": str(stored.generation),
            "x-goog-stored-content-length": str(len(stored.data))}
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if wanted:
            start, end = int(wanted[1]), int(wanted[2]) if wanted[2] else len(data) - 1
            if start >= len(data) > 0:
                raise ApiError(416, "Requested range not satisfiable")
            code, data = 206, data[start:end + 1]
            headers["Content-Range"] = f"bytes {start}-{start + len(data) - 1}/{len(stored.data)}"
        self._send(code, data, stored.content_type, headers)

    def _upload(self, method: str, bucket: str, query: dict[str, str], body: bytes) -> None:
        state, kind = self.server.state, query.get("uploadType")
        state.objects(bucket)  # 404 for a missing bucket, whatever the upload type
        if kind == "media" and method == "POST":
            self._unless_refused(query.get("name", ""))
            return self._stored(bucket, query.get("name", ""), body, self.headers.get("Content-Type"),
                                query.get("ifGenerationMatch"))
        if kind == "multipart" and method == "POST":
            metadata, data, content_type = _multipart(self.headers.get("Content-Type", ""), body)
            self._unless_refused(metadata.get("name") or query.get("name", ""))
            stored = StoredObject(data, "", 0, "")
            for key, actual in (("crc32c", stored.crc32c), ("md5Hash", stored.md5)):
                if metadata.get(key) not in (None, actual):
                    raise ApiError(400, f"Provided {key} {metadata[key]} doesn't match calculated {actual}.")
            return self._stored(bucket, metadata.get("name") or query.get("name", ""), data,
                                metadata.get("contentType") or content_type, query.get("ifGenerationMatch"))
        if kind == "resumable" and method == "POST":
            metadata = json.loads(body or b"{}")
            self._unless_refused(metadata.get("name") or query.get("name", ""))
            upload_id = uuid.uuid4().hex
            state.uploads[upload_id] = {"bucket": bucket, "name": metadata.get("name") or query.get("name", ""),
                                        "type": metadata.get("contentType") or self.headers.get("X-Upload-Content-Type"),
                                        "data": bytearray(), "match": query.get("ifGenerationMatch")}
            location = f"{self.server.base_url}/upload/storage/v1/b/{bucket}/o?uploadType=resumable&upload_id={upload_id}"
            return self._send(200, b"", headers={"Location": location})
        if kind == "resumable" and method == "PUT":
            if (done := state.finished.get(query.get("upload_id", ""))) is not None:  # its last chunk sent again
                return self._json(200, done)  # as Cloud Storage answers: with the object it made
            session = state.uploads.get(query.get("upload_id", ""))
            if session is None:
                raise ApiError(404, "No such upload session")
            self._unless_refused(session["name"])
            return self._chunk(query["upload_id"], session, body)
        raise ApiError(400, f"uploadType={kind} with {method} is not served by the Cloud Storage stand-in")

    def _unless_refused(self, name: str) -> None:
        if (code := self.server.state.refusing(name)) is not None:
            raise ApiError(code, f"Cloud Storage is unavailable ({code}): an outage of the stand-in (state.outage)")

    def _chunk(self, upload_id: str, session: dict, body: bytes) -> None:
        sent = re.fullmatch(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)", self.headers.get("Content-Range", ""))
        if sent is None:
            raise ApiError(400, "Content-Range is required")
        if sent[1] is not None and int(sent[1]) == len(session["data"]):
            session["data"] += body
        total = sent[3]
        if total != "*" and int(total) == len(session["data"]):
            del self.server.state.uploads[upload_id]
            return self._stored(session["bucket"], session["name"], bytes(session["data"]), session["type"],
                                session["match"], upload_id)
        received = len(session["data"])
        self._send(308, b"", headers={"Range": f"bytes=0-{received - 1}"} if received else {})

    def _stored(self, bucket: str, name: str, data: bytes, content_type: str | None, match: str | None = None,
                upload_id: str | None = None) -> None:
        self.server.state.wait_if_held(name, "store")
        stored = self.server.state.put(bucket, name, data, content_type or "application/octet-stream", match)
        if upload_id is not None:
            self.server.state.finish(upload_id, self._resource(bucket, name, stored))
        if self.server.state.answer_lost(name):  # stored, and no answer (StorageState.lose_answer)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._json(200, self._resource(bucket, name, stored))


def _multipart(content_type: str, body: bytes) -> tuple[dict, bytes, str | None]:
    """(metadata, content, content type) of a ``multipart/related`` upload body."""
    boundary = re.search(r'boundary="?([^";]+)"?', content_type)
    if boundary is None:
        raise ApiError(400, "multipart upload without a boundary")
    parts = body.split(b"--" + boundary[1].encode())[1:-1]
    if len(parts) != 2:
        raise ApiError(400, "a multipart upload has two parts: metadata, then content")
    (_, meta), (data_head, data) = (_part(part) for part in parts)
    found = re.search(rb"(?i)content-type:\s*([^\r\n]+)", data_head)
    return json.loads(meta), data, found[1].decode() if found else None


def _part(part: bytes) -> tuple[bytes, bytes]:
    head, _, content = part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
    return head, content.removesuffix(b"\r\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: StorageState
    base_url: str


class StorageStandIn:
    """``start()`` serves in a background thread; ``address`` is what STORAGE_EMULATOR_HOST takes."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.state = StorageState()
        self._server = _Server((host, port), _Handler)
        self._server.state = self.state
        self._server.base_url = f"http://{host}:{self._server.server_address[1]}"
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return self._server.base_url

    def start(self) -> "StorageStandIn":
        self._thread = threading.Thread(target=self._server.serve_forever, name="storage-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "StorageStandIn":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m zen_dev.local.storage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9023)
    parser.add_argument("--bucket", action="append", default=[],
                        help="a bucket to create, NAME or NAME=LOCATION (e.g. europe-west4; default US); repeatable")
    args = parser.parse_args(argv)
    standin = StorageStandIn(args.host, args.port)
    for bucket in args.bucket:
        name, _, location = bucket.partition("=")
        standin.state.create_bucket(name, location or "US")
    try:  # the line too: a Ctrl-C as soon as it is read may land within its print
        print(f"STORAGE_EMULATOR_HOST={standin.address}", flush=True)
        standin._server.serve_forever()
    except KeyboardInterrupt:  # Ctrl-C: stopped quietly, as the other stand-ins stop
        pass


if __name__ == "__main__":
    main()
