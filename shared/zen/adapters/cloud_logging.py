"""Job output in Cloud Logging, through the official client (``google-cloud-logging``): the agent's sink
(one entry per line in log ``zen-jobs``, written in batches), the agent's own WARNING and ERROR lines
(log ``zen-agent``, ``agent_log_handler``) and ``zen logs``' paced reader, which reads
page by page within the project's read quota and retries 429s with a backoff. ``sink_from_env`` and
``reader_from_env`` choose between it and the local directory of ``zen.adapters.joblogs``.

The entry's labels, payload, severity and resource: docs/reference/agent.md, "Job output"; the reader's
pacing and retries: docs/reference/cli.md, ``zen logs``.
"""

from __future__ import annotations

import itertools
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Iterator, Mapping

from zen.adapters.joblogs import (DIR_ENV, ENDPOINT_ENV, LOG_NAME, LocalReader, LocalSink, OutputEntry, Reader, Sink,
                                  SinkError, SinkRefused)

MAX_BATCH_ENTRIES = 1000
READ_PAGES = 5  # pages (of page_size entries) one read of a followed attempt takes at most (an earlier one: all)
REQUEST_INTERVAL_S = 1.2  # between two entries:list requests of a reader: 50 a minute, under the ~60 of the quota
RETRY_FIRST_S = 2.0  # a request answered 429 is made again after this, doubling ...
RETRY_MAX_S = 32.0  # ... up to this
RETRY_FOR_S = 180.0  # requests refused (429) this long make the read fail (SinkError)
# An entry past a missing seq waits this long for it (Cloud Logging may show a later entry first);
# after that the missing one is taken as lost and the rest is printed.
SETTLE_S = 10.0
# Without a timestamp clause the client only lists the last 24 hours; _Default keeps 30 days.
READ_BACK = timedelta(days=31)
_SEVERITY = {"stdout": "INFO", "stderr": "WARNING", "zen": "NOTICE"}
AGENT_LOG_NAME = "zen-agent"  # the agent's own lines (its stderr, in the VM's journal, is not shipped by the image)


def logging_client(project: str, endpoint: str | None = None):
    from google.cloud import logging as cloud_logging

    if not endpoint:
        return cloud_logging.Client(project=project, _use_grpc=False)
    from google.auth.credentials import AnonymousCredentials

    base = endpoint if endpoint.startswith(("http://", "https://")) else f"http://{endpoint}"
    return cloud_logging.Client(project=project, credentials=AnonymousCredentials(), _use_grpc=False,
                                client_options={"api_endpoint": base})


def _filter_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def job_filter(project: str, job_id: str, attempt: int | None = None,
               read: Mapping[str, int] | None = None) -> str:
    """The Logging query for one job (optionally one attempt, and of it only the lines not ``read`` yet:
    VM -> the last seq read of it; a gang's nodes each number their lines from 1, and a VM not read yet
    has all of its lines to come)."""
    parts = [f"logName={_filter_quote(f'projects/{project}/logs/{LOG_NAME}')}",
             f"labels.job_id={_filter_quote(job_id)}"]
    if attempt is not None:
        parts.append(f"labels.attempt={_filter_quote(str(attempt))}")
    for vm, seq in sorted((read or {}).items()):
        parts.append(f"NOT (labels.vm={_filter_quote(vm)} AND jsonPayload.seq<={int(seq)})")
    return " AND ".join(parts)


def _node(project: str, labels: Mapping[str, str]):
    """The VM as a ``generic_node`` (location: the zone, namespace: the cluster, node_id: the VM): no entry
    depends on the VM still existing, as a ``gce_instance`` one's instance id would."""
    from google.cloud.logging import Resource

    return Resource(type="generic_node", labels={
        "project_id": project, "location": labels.get("zone", ""),
        "namespace": labels.get("cluster", ""), "node_id": labels.get("vm", "")})


def agent_log_handler(client, project: str, labels: Mapping[str, str]) -> logging.Handler:
    """The agent's own lines of WARNING and above (claims refused, staging failed, fences, retirements,
    power-offs), as JSON (``zen.logs.JsonFormatter``) in log ``zen-agent``, with the VM's labels (``vm``,
    ``cluster``, ``region``, ``zone``) on the resource job output uses: the dashboard's "Logs of one VM"
    link finds them by ``labels.vm``. The client's background thread writes them in batches; a line it
    cannot write is dropped (the journal still has it), never held up."""
    from google.cloud.logging.handlers import CloudLoggingHandler

    from zen.logs import JsonFormatter

    handler = CloudLoggingHandler(client, name=AGENT_LOG_NAME, resource=_node(project, labels), labels=dict(labels))
    handler.setLevel(logging.WARNING)
    handler.setFormatter(JsonFormatter())
    return handler


class CloudSink:
    def __init__(self, client, project: str, labels: Mapping[str, str]):
        self._labels = dict(labels)
        # Given on every entry: a batch's entries otherwise default to the "global" resource.
        self._resource = _node(project, self._labels)
        self._logger = client.logger(LOG_NAME, resource=self._resource)

    def write(self, entries: list[OutputEntry]) -> None:
        from google.api_core import exceptions as gexc
        from google.auth.exceptions import GoogleAuthError

        for start in range(0, len(entries), MAX_BATCH_ENTRIES):
            batch = self._logger.batch()
            for entry in entries[start:start + MAX_BATCH_ENTRIES]:
                labels = {**self._labels, "job_id": entry.job_id, "attempt": str(entry.attempt),
                          "stream": entry.stream, "vm": entry.vm}
                batch.log_struct({"message": entry.text, "seq": entry.seq, "final": entry.final},
                                 labels=labels, resource=self._resource,
                                 severity=_SEVERITY.get(entry.stream, "DEFAULT"),
                                 timestamp=datetime.fromisoformat(entry.time),
                                 insert_id=f"{entry.job_id}-{entry.attempt}-{entry.vm}-{entry.seq}")
            try:
                batch.commit()
            except gexc.BadRequest as exc:  # 400 (INVALID_ARGUMENT over HTTP): an entry too large, for good
                raise SinkRefused(f"Cloud Logging refused a batch as invalid: {exc}") from None
            except (gexc.GoogleAPIError, GoogleAuthError, OSError) as exc:  # incl. a token refresh that failed
                raise SinkError(f"Cloud Logging refused a batch: {exc}") from None


class CloudReader:
    """``entries:list`` for one job, page by page and paced (see the module docstring); remembers the
    last ``seq`` printed per attempt, and holds entries past a gap across pages and calls."""

    def __init__(self, client, project: str, page_size: int = 1000):
        self._client = client
        self._project = project
        self._page_size = page_size
        self._last_request: float | None = None
        # Each (attempt, VM) numbers its lines from 1 (a gang's nodes share the attempt): read per pair.
        self._seen: dict[tuple[int, str], int] = {}
        self._pending: dict[tuple[int, str, int], OutputEntry] = {}  # read, not returned yet (past a gap)
        self._gaps: dict[tuple[int, str, int], float] = {}  # (attempt, VM, missing seq) -> when first seen missing
        self._finals: dict[int, set[str]] = {}  # attempt -> the VMs whose final entry was returned
        self._over: set[int] = set()  # attempts not read again (``read``): a gang's nodes all speak at once
        self._nodes = 1  # the VMs each attempt of the job is on (``expect_nodes``)

    def expect_nodes(self, nodes: int) -> None:
        """The job runs on ``nodes`` VMs (a gang, ``zen.core.gang``): an attempt is over only once that many VMs'
        final entries are read. Counted among the VMs heard so far, a node that had printed nothing yet when
        another's final entry was read twice (still staging, or its lines late) was never read."""
        self._nodes = max(1, nodes)

    def read_past(self, attempt: int, read: Mapping[str, int]) -> None:
        """Start ``attempt`` past ``read`` (VM -> the last seq its consumer has): a console stream resumed
        after a reconnect, which otherwise read the attempt again from its first line, paced."""
        for vm, seq in read.items():
            self._seen[(attempt, vm)] = max(self._seen.get((attempt, vm), 0), seq)

    def new_entries(self, job_id: str, attempt: int | None = None) -> list[OutputEntry]:
        """What ``read`` gives, at once: one attempt at most ``READ_PAGES`` pages (the next call goes
        on), a whole job (no attempt) to its end."""
        most = READ_PAGES if attempt is not None else None
        return [entry for page in self.read(job_id, attempt, most=most) for entry in page]

    def read(self, job_id: str, attempt: int | None = None, *, most: int | None = READ_PAGES,
             flush: bool = False) -> Iterator[list[OutputEntry]]:
        """The new entries of the job (of one attempt), one list per page read, in order (by attempt,
        then seq). ``most``: pages to read at most (None: to the end of the listing). ``flush``: at the end of the listing, entries past a gap are given too
        (``zen logs`` without ``-f``: what is there now) instead of waiting ``SETTLE_S`` for it."""
        from google.api_core import exceptions as gexc
        from google.auth.exceptions import TransportError
        from google.cloud.logging import ASCENDING

        if attempt is not None and attempt in self._over:
            return
        began = time.monotonic()  # a gap already held then: this read lists the attempt from it (``_in_order``)
        since = (datetime.now(timezone.utc) - READ_BACK).strftime("%Y-%m-%dT%H:%M:%SZ")
        pages, refused_since, backoff, ended, fresh = 0, None, RETRY_FIRST_S, False, False
        while not ended and (most is None or pages < most):
            # (Again after a 429: after the last seq returned, or from the last entry listed.)
            read = {vm: seq for (a, vm), seq in self._seen.items() if a == attempt} if attempt is not None else None
            query = f'{job_filter(self._project, job_id, attempt, read)} AND timestamp>="{since}"'
            listing = iter(self._client.list_entries(
                resource_names=[f"projects/{self._project}"], filter_=query, order_by=ASCENDING,
                page_size=self._page_size))
            try:
                while most is None or pages < most:
                    self._pace()
                    page = list(itertools.islice(listing, self._page_size))
                    refused_since, backoff = None, RETRY_FIRST_S
                    pages += 1
                    if attempt is None and page and page[-1].timestamp:
                        since = page[-1].timestamp.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                    self._take(page, job_id)
                    fresh = fresh or bool(page)
                    if len(page) < self._page_size:  # the listing's end (no request to learn it)
                        ended = True
                        break
                    yield self._release(cut=True)
            except gexc.TooManyRequests as exc:  # 429 (ResourceExhausted too): the read quota
                now = time.monotonic()
                refused_since = now if refused_since is None else refused_since
                if now - refused_since >= RETRY_FOR_S:
                    raise SinkError(f"cannot read Cloud Logging (throttled for {RETRY_FOR_S:g} s): {exc}") from None
                time.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_S)
            except (gexc.GoogleAPIError, OSError) as exc:
                raise SinkError(f"cannot read Cloud Logging: {exc}") from None
            except TransportError as exc:  # an expired token not refreshed, Google out of reach (a laptop offline)
                raise SinkError(f"cannot read Cloud Logging (could not reach Google to refresh the credentials): "
                                f"{exc}") from None
        # A listing cut short (most pages read): a gap may be filled by the rest.
        yield self._release(cut=not ended, flush=flush, looked_from=began if attempt is not None else None)
        streams = {vm for (a, vm) in self._seen if a == attempt}
        if (attempt is not None and ended and not fresh and len(streams) >= self._nodes
                and streams <= self._finals.get(attempt, set())):
            self._over.add(attempt)  # every VM heard ended, and a read since found nothing: not read again

    def _pace(self) -> None:
        if self._last_request is not None:
            wait = self._last_request + REQUEST_INTERVAL_S - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        self._last_request = time.monotonic()

    def _take(self, listed, job_id: str) -> None:
        for item in listed:
            labels = item.labels or {}
            payload = item.payload if isinstance(item.payload, dict) else {"message": str(item.payload)}
            entry = OutputEntry(job_id=labels.get("job_id", job_id), attempt=int(labels.get("attempt", 0)),
                                stream=labels.get("stream", ""), vm=labels.get("vm", ""),
                                seq=int(payload.get("seq", 0)),
                                time=item.timestamp.isoformat() if item.timestamp else "",
                                text=str(payload.get("message", "")), final=bool(payload.get("final", False)))
            if entry.seq > self._seen.get((entry.attempt, entry.vm), 0):  # read twice (a listing again): taken once
                self._pending[(entry.attempt, entry.vm, entry.seq)] = entry

    def _release(self, cut: bool, flush: bool = False, looked_from: float | None = None) -> list[OutputEntry]:
        out = self._in_order(sorted(self._pending.values(), key=lambda e: (e.attempt, e.vm, e.seq)), cut, flush,
                             looked_from)
        self._pending = {key: entry for key, entry in self._pending.items()
                         if entry.seq > self._seen.get((entry.attempt, entry.vm), 0)}
        return out

    def _in_order(self, entries: list[OutputEntry], cut: bool, flush: bool = False,
                  looked_from: float | None = None) -> list[OutputEntry]:
        """The entries that follow what was read without a gap, and those past a gap this reader has
        seen for ``SETTLE_S`` (its own clock: the VM's may differ) in a listing that was not cut short
        (the missing one is lost), or at once with ``flush``; the rest waits (in ``_pending``) for the
        next page or read. ``_seen`` moves only over what is returned, so a line that shows up late is
        not skipped for good. ``looked_from``: when a read of one attempt began, which listed it from
        its gaps (a read goes on after the last seq returned); a gap seen before then, for ``SETTLE_S``,
        ends the hold in a listing cut short too. Held there instead, an attempt with more than
        ``READ_PAGES`` pages past a line missing for good was listed again from it at every read, and
        nothing past it was ever returned (``zen logs -f`` and the console stopped at it)."""
        out, held, now = [], set(), time.monotonic()
        for entry in entries:
            stream = (entry.attempt, entry.vm)
            last = self._seen.get(stream, 0)
            if stream in held or entry.seq <= last:
                continue
            if entry.seq != last + 1 and not flush:
                since = self._gaps.setdefault((*stream, last + 1), now)
                looked = looked_from is not None and since < looked_from  # this whole read listed from it
                if (cut and not looked) or now - since < SETTLE_S:
                    held.add(stream)
                    continue
            out.append(entry)
            self._seen[stream] = entry.seq
            if entry.final:
                self._finals.setdefault(entry.attempt, set()).add(entry.vm)
        return out


def sink_from_env(env: Mapping[str, str], project: str, *, cloud_by_default: bool,
                  labels: Mapping[str, str] | None = None) -> Sink | None:
    """The agent's sink: local when ``ZEN_JOB_LOGS_DIR`` is set, Cloud Logging on a real VM (or
    when ``ZEN_LOGGING_ENDPOINT`` names a stand-in), else none (output only in the heartbeat tail)."""
    if env.get(DIR_ENV):
        return LocalSink(env[DIR_ENV])
    if cloud_by_default or env.get(ENDPOINT_ENV):
        return CloudSink(logging_client(project, env.get(ENDPOINT_ENV)), project, dict(labels or {}))
    return None


def own_log_from_env(env: Mapping[str, str], project: str, *, cloud_by_default: bool,
                     labels: Mapping[str, str]) -> logging.Handler | None:
    """Where the agent's own WARNING and ERROR lines go besides its stderr: Cloud Logging wherever job output
    goes there (``sink_from_env``), else nowhere (the local stack prints the agents' stderr)."""
    if env.get(DIR_ENV) or not (cloud_by_default or env.get(ENDPOINT_ENV)):
        return None
    return agent_log_handler(logging_client(project, env.get(ENDPOINT_ENV)), project, labels)


def reader_from_env(env: Mapping[str, str], project: str) -> Reader:
    """``zen logs``' source: the local stack's directory when one is in use, else Cloud Logging."""
    if env.get(DIR_ENV):
        return LocalReader(env[DIR_ENV])
    return CloudReader(logging_client(project, env.get(ENDPOINT_ENV)), project)
