"""The console's web application (Flask, server-rendered Jinja templates): routes, input checks, errors.

Pages: ``/jobs`` (filters ``user``, ``queue``, ``status``, ``label=K=V[,K=V]``, ``array``; ``id`` opens a
job; ``before``/``before_id`` page on), ``/jobs/<id>`` (and its output as server-sent events at
``/jobs/<id>/output``), ``/queues``, ``/clusters``, ``/usage`` (``by``, ``window``). Every page takes
``?fragment=1`` for its live part alone, which the page's small script fetches every few seconds and
swaps in. Read-only: every route answers GET (and HEAD) alone; nothing here writes to the database.
Every answer carries ``PAGE_HEADERS`` (its own scripts and styles alone, framed by no site, never sniffed).
Bad input (unknown ids, NUL bytes, over-long or malformed parameters, a missing or forged identity) is a
4xx page naming the problem, never a stack trace.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from flask import Flask, Response, abort, g, redirect, render_template, request, stream_with_context, url_for
from werkzeug.exceptions import HTTPException

from zen.adapters.joblogs import OutputEntry, ReadsPast
from zen.console import pages
from zen.console.viewers import Identify, NoIdentity, Viewer, viewer_of
from zen.core.config import ZenConfig
from zen.core.errors import Rejected, TransientError
from zen.core.models import JobStatus

log = logging.getLogger("zen.console")

MAX_PARAM_CHARS = 200  # longer than any id, user, queue or label Zen accepts
REFRESH_S = 2.0  # how often a page's live part is fetched again
OUTPUT_POLL_S = 0.5  # how often the output stream reads new lines (a local stack's: zen logs -f's POLL_S)
OUTPUT_SETTLE_S = 5.0  # after a job's end, how long the stream waits for its last lines (zen logs -f)
STREAM_MAX_S = 300.0  # a stream ends after this long; the browser reconnects where it left off
OUTPUT_RETRY_MS = 5000  # while the database cannot be read, the browser asks for the output again this often


# Every answer's: its pages show one user's text (a job's command, labels, report) to others. Scripts and styles
# run only when the console wrote them (the nonce is fresh per answer, and text is escaped besides), no other
# site frames a page under buttons of its own, and no answer is sniffed as something its type does not say.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
                               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}


class BadRequest(Exception):
    """A parameter the console cannot use (answered 400 with this text)."""


def create_app(config: ZenConfig, database: Any, identify: Identify,
               reader_factory: Callable[[], Any] | None = None, clock: Callable[[], datetime] | None = None,
               page_size: int = pages.PAGE_SIZE, refresh_s: float = REFRESH_S,
               output_timing: tuple[float, float] | None = None) -> Flask:
    """The console over ``database`` (a ``zen.store.db.Database``, best a read-only role's), with viewers
    named by ``identify`` (``zen.console.viewers``) and job output read by ``reader_factory()`` (a new
    ``zen.adapters.joblogs.Reader`` per stream; None: output is not shown), every ``output_timing`` =
    (poll, settle) seconds as ``zen logs -f`` reads that source (default OUTPUT_POLL_S, OUTPUT_SETTLE_S)."""
    app = Flask(__name__, template_folder=str(Path(__file__).parent / "templates"))
    app.config.update(ZEN_CONFIG=config)
    refresh_ms = max(int(refresh_s * 1000), 200)
    now = clock or (lambda: datetime.now(timezone.utc))

    @app.before_request
    def checks() -> None:
        g.nonce = secrets.token_urlsafe(18)  # this answer's own <script> and <style> (PAGE_HEADERS)
        if request.method not in ("GET", "HEAD"):
            abort(405)
        for name, value in [*request.args.items(multi=True), *((request.view_args or {}).items())]:
            if len(name) > MAX_PARAM_CHARS or len(str(value)) > MAX_PARAM_CHARS:
                raise BadRequest(f"parameter {name[:40]!r} is longer than {MAX_PARAM_CHARS} characters")
            if "\x00" in name or "\x00" in str(value):
                raise BadRequest(f"parameter {name[:40]!r} holds a NUL byte")
        try:
            principal, source = identify(request.headers)
        except Rejected as exc:  # NoIdentity: none was given (401); else a forged, expired or foreign one (403)
            g.identity_error = str(exc)
            abort(401 if isinstance(exc, NoIdentity) else 403)
        except TransientError as exc:  # IAP's keys out of reach: the identity cannot be checked now (not the database)
            g.unavailable = f"your identity cannot be verified now ({exc})"
            raise
        g.viewer = viewer_of(config, principal, source)

    @app.after_request
    def page_headers(answer: Response) -> Response:
        nonce = getattr(g, "nonce", None) or secrets.token_urlsafe(18)
        for name, value in PAGE_HEADERS.items():
            answer.headers[name] = value.format(nonce=nonce)
        return answer

    @app.context_processor
    def common() -> dict[str, Any]:
        return {"viewer": getattr(g, "viewer", None), "refresh_ms": refresh_ms,
                "project": config.project, "nonce": getattr(g, "nonce", "")}

    def render(template: str, fragment: str, **values: Any) -> str:
        """The whole page, or its live part alone (``?fragment=1``)."""
        if request.args.get("fragment") == "1":
            return render_template(fragment, **values)
        return render_template(template, fragment=fragment, **values)

    @app.get("/")
    def home():
        return redirect(url_for("jobs"))

    @app.get("/jobs")
    def jobs():
        viewer: Viewer = g.viewer
        wanted = request.args.get("id", "").strip()
        if wanted:
            return redirect(url_for("job", job_id=wanted))
        filters = _filters()
        before = _keyset()
        with reading(database) as session:
            page = pages.job_list(session, viewer, filters, before, limit=page_size, now=now())
        following = None
        if page["next"] is not None:
            at, job_id = page["next"]
            following = url_for("jobs", **filters.query(), before=at.isoformat(), before_id=job_id)
        return render("jobs.html", "jobs_fragment.html", page=page, filters=filters, following=following,
                      statuses=[s.value for s in JobStatus], first=before is None,
                      fragment_url=url_for("jobs", **filters.query(), **_keyset_query(), fragment="1"))

    @app.get("/jobs/<job_id>")
    def job(job_id: str):
        from zen.store import repository

        viewer: Viewer = g.viewer
        with reading(database) as session:
            found = repository.get_job(session, job_id)
            if found is None and pages.array_visible(session, viewer, job_id):  # an array's id: its tasks
                return redirect(url_for("jobs", array=job_id))
            if found is None or not viewer.may_see(found):  # the same answer: no hint of others' ids
                g.missing = f"no job {job_id} that {viewer.principal} may see"
                abort(404)
            detail = pages.job_detail(session, config, found)
        return render("job.html", "job_fragment.html", d=detail, output=reader_factory is not None,
                      fragment_url=url_for("job", job_id=job_id, fragment="1"))

    @app.get("/jobs/<job_id>/output")
    def output(job_id: str):
        """The job's output as server-sent events, as ``zen logs -f`` prints it: one ``line`` event per
        entry, then ``end``. A line's id is where the stream is (``Resume``), so a reconnecting browser
        resumes after the last it got."""
        from zen.store import repository

        viewer: Viewer = g.viewer
        if reader_factory is None:
            abort(404)
        with reading(database) as session:
            found = repository.get_job(session, job_id)
        if found is None or not viewer.may_see(found):
            g.missing = f"no job {job_id} that {viewer.principal} may see"
            abort(404)
        after = _resume_point(request.headers.get("Last-Event-ID") or request.args.get("after") or "")
        return Response(stream_with_context(_stream(job_id, after)), mimetype="text/event-stream",
                        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    def _stream(job_id: str, after: "Resume") -> Iterator[str]:
        from zen.store import repository

        reader = reader_factory()  # type: ignore[misc]
        if isinstance(reader, ReadsPast):  # Cloud Logging: what the page has is not listed again
            reader.read_past(after.attempt, after.read_from())
        poll_s, settle_s = output_timing or (OUTPUT_POLL_S, OUTPUT_SETTLE_S)
        started = time.monotonic()
        ended_at: float | None = None
        yield "retry: 2000\n\n"
        while time.monotonic() - started < STREAM_MAX_S:
            try:
                with reading(database) as session:
                    current = repository.get_job(session, job_id)
            except TransientError as exc:  # ended, not broken: the browser reconnects after ``retry`` (unavailable)
                log.warning("console output stream paused", extra={"job_id": job_id, "error": str(exc)})
                return
            got = False  # any line read, sent or not: a catch-up is no quiet (the end waits for it)
            if current is not None and hasattr(reader, "expect_nodes"):
                reader.expect_nodes(current.nodes)  # a gang's attempt is over at its every node's final entry
            for attempt in range(max(1, after.floor), (current.attempt if current else 0) + 1):
                earlier = current is not None and attempt < current.attempt
                for entry in _new_entries(reader, job_id, attempt, whole=earlier):
                    got = True
                    if after.sent(entry.attempt, entry.vm, entry.seq) or not _VM_NAME.match(entry.vm):
                        continue  # a VM name no agent writes (a log label with a line break: a forged event)
                    after = after.past(entry.attempt, entry.vm, entry.seq)
                    data = {"attempt": entry.attempt, "stream": entry.stream, "vm": entry.vm, "text": entry.text,
                            "final": entry.final}
                    yield f"id: {after}\nevent: line\ndata: {json.dumps(data)}\n\n"
            if current is not None and current.status.terminal:
                ended_at = None if got else (ended_at or time.monotonic())
                if ended_at is not None and time.monotonic() - ended_at >= settle_s:
                    yield f"event: end\ndata: {json.dumps({'status': current.status.value})}\n\n"
                    return
            if not got:
                yield ": waiting\n\n"  # a comment: keeps proxies from closing a quiet stream
            time.sleep(poll_s)

    @app.get("/queues")
    def queues():
        with reading(database) as session:
            rows = pages.queues(session, config, g.viewer)
        return render("queues.html", "queues_fragment.html", queues=rows, fragment_url=url_for("queues", fragment="1"))

    @app.get("/clusters")
    def clusters():
        with reading(database) as session:
            rows = pages.clusters(session, config, now())
        return render("clusters.html", "clusters_fragment.html", clusters=rows,
                      fragment_url=url_for("clusters", fragment="1"))

    @app.get("/usage")
    def usage():
        from zen.store.usage import GROUPINGS

        by = request.args.get("by", "user")
        window = request.args.get("window", "7d")
        if by not in GROUPINGS:
            raise BadRequest(f"by must be one of {', '.join(GROUPINGS)}")
        if window not in pages.USAGE_WINDOWS:
            raise BadRequest(f"window must be one of {', '.join(pages.USAGE_WINDOWS)}")
        moment = now()
        with reading(database) as session:
            report = pages.usage(session, config, by, moment - pages.USAGE_WINDOWS[window], moment)
        chart = pages.bar_chart(report["groups"], by, "gpu_hours")
        return render("usage.html", "usage_fragment.html", report=report, by=by, window=window, chart=chart,
                      groupings=GROUPINGS, windows=list(pages.USAGE_WINDOWS),
                      fragment_url=url_for("usage", by=by, window=window, fragment="1"))

    @app.errorhandler(BadRequest)
    def bad_request(exc: BadRequest):
        return render_template("error.html", code=400, title="Bad request", detail=str(exc)), 400

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        detail = getattr(g, "missing", None) or getattr(g, "identity_error", None) or exc.description
        return render_template("error.html", code=exc.code, title=exc.name, detail=detail), exc.code

    @app.errorhandler(TransientError)
    def unavailable(exc: TransientError):
        log.warning("console read failed", extra={"error": str(exc)})
        if request.endpoint == "output":  # an EventSource answered anything but an event stream gives up for good
            return Response(f"retry: {OUTPUT_RETRY_MS}\n\n", mimetype="text/event-stream",
                            headers={"Cache-Control": "no-cache"})
        again = "the page tries again" if request.args.get("fragment") == "1" else "reload the page in a moment"
        detail = getattr(g, "unavailable", None) or "the database cannot be read now"
        return render_template("error.html", code=503, title="Unavailable", detail=f"{detail}; {again}"), 503

    @app.errorhandler(Exception)
    def failed(exc: Exception):
        if isinstance(exc, HTTPException):
            return http_error(exc)
        log.exception("console page failed")
        return render_template("error.html", code=500, title="Error",
                               detail="the console failed to build this page (its log says why)"), 500

    return app


@contextmanager
def reading(database: Any) -> Iterator[Any]:
    """A read-only transaction of one snapshot (a page's figures agree with each other): whatever role the
    console connects as (a local stack's owns every table), a statement that would write fails
    (``zen.store.usage.read_snapshot``); deployed, its role is zen_reader too."""
    from zen.store.usage import read_snapshot

    with database.transaction() as session:
        read_snapshot(session)
        yield session


def _filters() -> pages.JobFilters:
    args = request.args
    status = (args.get("status") or "").strip().upper() or None
    if status is not None and status not in {s.value for s in JobStatus}:
        raise BadRequest(f"status must be one of {', '.join(s.value for s in JobStatus)}")
    labels: dict[str, str] = {}
    # KEY=VALUE pairs joined by commas; a comma not followed by KEY= is part of a value (tags=a,b).
    for text in filter(None, re.split(r",(?=[^,=]*=)", args.get("label") or "")):
        key, sep, value = text.strip().partition("=")
        if not sep or not key:
            raise BadRequest(f"label {text[:60]!r} is not KEY=VALUE")
        labels[key] = value
    return pages.JobFilters(user=(args.get("user") or "").strip() or None, queue=(args.get("queue") or "").strip() or None,
                            status=status, array=(args.get("array") or "").strip() or None, labels=labels)


def _keyset() -> tuple[datetime, str] | None:
    at, job_id = request.args.get("before"), request.args.get("before_id")
    if not at and not job_id:
        return None
    try:
        moment = datetime.fromisoformat(at or "")
    except ValueError:
        raise BadRequest("before must be an ISO date and time (the link of the next page gives one)") from None
    if moment.tzinfo is None or not job_id:
        raise BadRequest("before needs a time zone, and before_id a job id")
    try:
        return moment.astimezone(timezone.utc), job_id
    except OverflowError:  # 0001-01-01T00:00+01:00: no such moment in UTC (the database failed on it: a 500)
        raise BadRequest("before is out of range: give a date and time between the years 1 and 9999 in UTC") from None


def _keyset_query() -> dict[str, str]:
    return {k: request.args[k] for k in ("before", "before_id") if request.args.get(k)}


@dataclass(frozen=True)
class Resume:
    """Where a job's output stream is: its attempt, and the last line sent of each of that attempt's VMs
    (each numbers its own lines: a gang's nodes from 1 each). Written ``attempt:vm=seq;vm=seq`` as the
    event id; an older page's ``attempt:seq`` counts for every VM, and is carried on as ``*=seq``.

    In the stream the earlier attempts' lines sent are kept too (``earlier``): Cloud Logging may show an
    attempt's last lines after the next attempt's first, and they are sent then. The id names the attempt
    sent last alone, so a reconnecting page counts every earlier attempt as sent (``floor``) and they are
    not read again."""

    attempt: int = 0
    seqs: tuple[tuple[str, int], ...] = ()
    any_vm: int = -1  # the ``attempt:seq`` form's seq
    earlier: tuple[tuple[int, str, int], ...] = ()  # (attempt, VM, last seq sent) below ``attempt``
    floor: int = 0  # attempts below it count as sent whole (a resumed stream's)

    def sent(self, attempt: int, vm: str, seq: int) -> bool:
        if attempt != self.attempt:
            return attempt < self.floor or seq <= {(a, v): n for a, v, n in self.earlier}.get((attempt, vm), 0)
        return seq <= max(dict(self.seqs).get(vm, -1), self.any_vm)

    def past(self, attempt: int, vm: str, seq: int) -> "Resume":
        if attempt < self.attempt:
            marks = {(a, v): n for a, v, n in self.earlier} | {(attempt, vm): seq}
            return replace(self, earlier=tuple(sorted((a, v, n) for (a, v), n in marks.items())))
        if attempt > self.attempt:
            left = tuple((self.attempt, v, n) for v, n in self.seqs)  # (an old page's ``*``: that attempt whole)
            return Resume(attempt, ((vm, seq),), earlier=self.earlier + left,
                          floor=self.attempt + 1 if self.any_vm >= 0 else self.floor)
        return replace(self, seqs=tuple(sorted({**dict(self.seqs), vm: seq}.items())))

    def read_from(self) -> dict[str, int]:
        """The current attempt's VMs and the last line each sent (a reader starts past them)."""
        return dict(self.seqs)

    def __str__(self) -> str:
        floor = [("*", self.any_vm)] if self.any_vm >= 0 else []
        return f"{self.attempt}:" + ";".join(f"{vm}={seq}" for vm, seq in floor + list(self.seqs))


def _new_entries(reader: Any, job_id: str, attempt: int, whole: bool) -> Iterator[OutputEntry]:
    """The reader's new entries of ``attempt``; ``whole`` (an attempt before the job's current one): to the end
    of Cloud Logging's listing, page by page, before the next attempt is read. Read ``READ_PAGES`` pages a poll,
    its tail went out after the next attempt's head, and a reconnect then, whose id names the attempt sent last
    (``Resume``), never sent it."""
    read = getattr(reader, "read", None) if whole else None
    if read is None:
        yield from reader.new_entries(job_id, attempt)
        return
    for page in read(job_id, attempt, most=None):
        yield from page


_VM_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}\Z")  # GCE's names and more; never a line break into the stream's id:


def _resume_point(text: str) -> Resume:
    """``Last-Event-ID`` or ``?after=`` (the client's: echoed in each event's ``id:``, so a VM name not one
    ``_VM_NAME`` matches is dropped, as it would write fields of its own into the stream)."""
    attempt, _, rest = text.partition(":")
    try:
        if "=" not in rest:
            return Resume(int(attempt), any_vm=int(rest), floor=int(attempt))
        seqs = dict((vm, int(seq)) for vm, _, seq in (part.partition("=") for part in rest.split(";"))
                    if vm == "*" or _VM_NAME.match(vm))
        floor = seqs.pop("*", -1)
        return Resume(int(attempt), tuple(sorted(seqs.items())), floor, floor=int(attempt))
    except ValueError:
        return Resume()
