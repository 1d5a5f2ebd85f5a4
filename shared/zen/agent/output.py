"""A job's output on its way out of the VM: read line by line, labelled, limited, shipped.

``StreamCapture`` reads stdout and stderr (a thread each), cutting long lines and flushing partial
ones; ``AttemptOutput`` numbers every line and ships it to the sink (``zen.adapters.joblogs``) at a
bounded rate and size, never losing the tail, ending with a ``final`` ``zen`` line. The agent also keeps
the last ``tail_bytes`` for the final heartbeat's ``message``.
Limits: docs/reference/agent.md#job-output
"""

from __future__ import annotations

import codecs
import itertools
import json
import logging
import os
import select
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from zen.adapters.joblogs import OutputEntry, Sink, SinkError, SinkRefused

log = logging.getLogger("zen.agent.output")
# Cloud Logging takes at most 10 MB per entries.write request: a send stays under 8 MB of text, with
# room for each entry's labels and fields.
REQUEST_BYTES = 8 * 1024 * 1024
ENTRY_OVERHEAD_BYTES = 512
MASK = "***"  # what a job's secret value is written as in its output (AttemptOutput.hide)
MIN_HIDDEN_CHARS = 4


@dataclass(frozen=True)
class OutputLimits:
    line_bytes: int = 16 * 1024
    flush_s: float = 1.0
    rate_lines: int = 1000
    hold_s: float = 30.0
    limit_bytes: int = 32 * 1024 * 1024
    tail_bytes: int = 1024 * 1024

    @property
    def head_bytes(self) -> int:
        return self.limit_bytes - self.tail_bytes

    @property
    def batch_lines(self) -> int:
        return max(1, int(self.rate_lines * self.flush_s))

    @property
    def max_queued(self) -> int:
        return max(self.batch_lines, int(self.rate_lines * self.hold_s))


def _size(text: str) -> int:
    return len(text.encode("utf-8", errors="replace")) + 1


class _Recent:
    """The last ``limit`` bytes of both streams, for the final heartbeat's message."""

    def __init__(self, limit: int):
        self._limit = limit
        self._lines: deque[str] = deque()
        self._bytes = 0

    def add(self, text: str, newline: bool) -> None:
        piece = text + "\n" if newline else text
        self._lines.append(piece)
        self._bytes += len(piece.encode("utf-8", errors="replace"))  # what popping it takes off again
        while self._bytes > self._limit and len(self._lines) > 1:
            self._bytes -= len(self._lines.popleft().encode("utf-8", errors="replace"))

    def text(self) -> str:
        data = "".join(self._lines).encode("utf-8", errors="replace")
        return data[-self._limit:].decode("utf-8", errors="ignore")


class AttemptOutput:
    """One attempt's output: ``add`` from the capture threads, ``close`` once at the end."""

    def __init__(self, job_id: str, attempt: int, vm: str, sink: Sink | None, limits: OutputLimits = OutputLimits(),
                 recent_bytes: int = 4096, wall_clock: Callable[[], float] = time.time, numbered: int = 0):
        self.job_id, self.attempt, self.vm = job_id, attempt, vm
        self._sink = sink
        self._limits = limits
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._recent = _Recent(recent_bytes)
        self._queue: deque[OutputEntry] = deque()
        self._window: deque[tuple[str, str, str, int]] = deque()  # (stream, text, time, size)
        self._window_bytes = 0
        self._dropped = [0, 0]  # lines, bytes fallen out of the window
        self._seq = numbered  # its entries are numbered from here on (``numbered``: an upload resumed, zen.agent.resume)
        self._hidden: tuple[str, ...] = ()  # the job's secret values (``hide``), longest first
        self._accepted_bytes = 0
        self._over_size = False
        self._behind = False
        self.shipped = 0
        self.refused = 0  # entries the sink refused as invalid, dropped
        self._shipping = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if sink is not None:
            self._thread = threading.Thread(target=self._ship_loop, name="zen-job-output-ship", daemon=True)
            self._thread.start()

    # -- capture side ----------------------------------------------------------------------------
    def hide(self, values: list[str]) -> None:
        """Write each of ``values`` (the job's secrets) as ``***`` in every line from now on, in the logs and
        the final report's tail alike. Values shorter than ``MIN_HIDDEN_CHARS`` are left: masking every
        ``1`` or ``ab`` would garble the output and tell which short strings the secret is. A value of several
        lines (a key file) is hidden line by line too: the output arrives a line at a time. The limits (a value
        cut across two pieces of a long line, or printed transformed): docs/explanations/security.md#secrets"""
        pieces = {piece for value in values for piece in (value, *value.splitlines())}
        with self._lock:
            self._hidden = tuple(sorted({p for p in pieces if len(p) >= MIN_HIDDEN_CHARS}, key=len, reverse=True))

    def add(self, stream: str, text: str, newline: bool = True) -> None:
        """One line (``newline``: it ended with one; else a piece of a long or partial line)."""
        now = datetime.fromtimestamp(self._wall_clock(), timezone.utc).isoformat()
        with self._lock:
            for value in self._hidden:  # longest first: a value inside another is not left half-masked
                if value in text:
                    text = text.replace(value, MASK)
            self._recent.add(text, newline)
            if self._sink is not None:
                self._route(stream, text, now, _size(text))

    def recent_text(self) -> str:
        with self._lock:
            return self._recent.text()

    def numbered(self) -> int:
        """The highest ``seq`` this output's entries reach before its final entry (``close``): those numbered, and
        those its ship thread may still number (a window held back while it was behind, after a line counting what fell
        out of it; one held for being over the size limit goes only at ``close``). An agent restarted numbers the
        attempt's end after it (``zen.agent.resume``), past the lines this one shipped."""
        with self._lock:
            held = len(self._window) + bool(self._dropped[0]) if self._behind and not self._over_size else 0
            return self._seq + held

    def _route(self, stream: str, text: str, at: str, size: int) -> None:
        limits = self._limits
        if not (self._over_size or self._behind):
            if self._accepted_bytes + size > limits.head_bytes:
                self._over_size = True
                self._enqueue("zen", f"[zen] output reached {limits.head_bytes} bytes: the middle is dropped from "
                                     f"here, the last {limits.tail_bytes} bytes are shipped when the attempt ends", at)
            elif len(self._queue) >= limits.max_queued:
                self._behind = True
            else:
                self._enqueue(stream, text, at, size)
                return
        self._window.append((stream, text, at, size))
        self._window_bytes += size
        # Its bytes, and its lines: a line costs the agent some 200 bytes of memory whatever its length, and is one
        # entry to send. Empty lines filled a window of 1 MiB with a million of them (some 200 MB held, and as many
        # entries queued at once when it went, too many to send before the final report: the tail was lost).
        while (self._window_bytes > limits.tail_bytes or len(self._window) > limits.max_queued) and len(self._window) > 1:
            *_, dropped = self._window.popleft()
            self._window_bytes -= dropped
            self._dropped[0] += 1
            self._dropped[1] += dropped

    def _enqueue(self, stream: str, text: str, at: str, size: int = 0, final: bool = False) -> None:
        self._seq += 1
        self._accepted_bytes += size
        self._queue.append(OutputEntry(self.job_id, self.attempt, stream, self.vm, self._seq, at, text, final))

    def _release_window(self, why: str) -> None:
        """Queue the window (after a line counting what fell out of it)."""
        lines, size = self._dropped
        if lines:
            self._enqueue("zen", f"[zen] {lines} lines ({size} bytes) dropped: {why}",
                          self._window[0][2] if self._window else "")
        self._dropped = [0, 0]
        while self._window:
            stream, text, at, size = self._window.popleft()
            self._enqueue(stream, text, at, size)
        self._window_bytes = 0

    # -- shipping side ---------------------------------------------------------------------------
    def _ship_loop(self) -> None:
        pause = self._limits.flush_s
        while not self._stop.wait(pause):
            try:
                self._ship_once(self._limits.batch_lines)
                pause = self._limits.flush_s
            except Exception as exc:  # noqa: BLE001 - a dead shipper would stall the output for good
                log.warning("job output not shipped; retrying", extra={
                    "job_id": self.job_id, "attempt": self.attempt, "error": f"{type(exc).__name__}: {exc}"})
                pause = min(pause * 2, 30.0)
            with self._lock:
                if self._behind and not self._over_size and len(self._queue) < self._limits.max_queued // 2:
                    self._behind = False
                    self._release_window(f"output came faster than {self._limits.rate_lines} lines/s "
                                         f"for more than {self._limits.hold_s:g} s")

    def _ship_once(self, most: int, wait_s: float = -1) -> int:
        """Ship up to ``most`` entries of at most ``REQUEST_BYTES`` from the head of the queue (one
        shipper at a time: ``close`` may overlap a write the ship thread still has under way; it waits
        ``wait_s`` for it, -1 for ever). A batch the sink refuses as invalid (``SinkRefused``: an
        entry over Cloud Logging's size limit) is halved until the entry is alone, and that entry is
        dropped: retrying it would hold up everything behind it for good."""
        sink = self._sink
        if sink is None:  # never: only an output with a sink queues entries and ships them
            return 0
        if not self._shipping.acquire(timeout=wait_s):
            raise SinkError("the ship thread is still writing")
        try:
            with self._lock:
                batch: list[OutputEntry] = []
                size = 0
                for entry in itertools.islice(self._queue, most):  # as sent: JSON, non-ASCII escaped
                    size += len(json.dumps(entry.text)) + ENTRY_OVERHEAD_BYTES
                    if batch and size > REQUEST_BYTES:
                        break
                    batch.append(entry)
            while batch:
                try:
                    sink.write(batch)
                    break
                except SinkRefused as exc:
                    if len(batch) > 1:
                        batch = batch[:len(batch) // 2]
                        continue
                    log.error("job output entry dropped: the sink refuses it", extra={
                        "job_id": self.job_id, "attempt": self.attempt, "seq": batch[0].seq, "error": str(exc)})
                    self.refused += 1
                    break
            with self._lock:
                for _ in batch:
                    self._queue.popleft()
            self.shipped += len(batch)
            return len(batch)
        finally:
            self._shipping.release()

    def close(self, note: str | None = None, budget_s: float = 60.0) -> int:
        """Ship what is left, then the final entry. Returns how many entries could not be shipped."""
        if self._thread is None:
            return 0
        deadline = time.monotonic() + budget_s
        self._stop.set()
        self._thread.join(max(0.0, budget_s / 2))  # a write under way: close ships the rest itself
        now = datetime.fromtimestamp(self._wall_clock(), timezone.utc).isoformat()
        with self._lock:
            why = (f"over the limit of {self._limits.limit_bytes} bytes per attempt" if self._over_size else
                   f"output came faster than {self._limits.rate_lines} lines/s")
            self._release_window(why)
            self._enqueue("zen", f"[zen] end of attempt {self.attempt} on {self.vm}" + (f": {note}" if note else ""),
                          now, final=True)
        pause, error = 0.2, "out of time"
        while True:  # within the budget, however fast or slow the sink answers
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                left = len(self._queue)
                log.error("job output lost: not shipped within the budget", extra={
                    "job_id": self.job_id, "attempt": self.attempt, "entries": left, "error": error})
                return left
            try:
                if not self._ship_once(10_000, wait_s=left_s):
                    return 0
            except Exception as exc:  # noqa: BLE001 - counted as lost once the budget is spent
                error = f"{type(exc).__name__}: {exc}"
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 5.0)


class StreamCapture:
    """Reads one pipe to its end in a thread, handing complete (or timed-out partial) lines to
    ``output.add``."""

    def __init__(self, pipe, stream: str, output: AttemptOutput, limits: OutputLimits):
        self._pipe = pipe
        self._stream = stream
        self._output = output
        self._limits = limits
        self._closed = threading.Event()
        # One decoder for the stream: a piece cut at line_bytes or flushed after flush_s ends where bytes do, maybe
        # inside a character, whose rest begins the next piece (each decoded alone, both halves were replaced).
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._thread = threading.Thread(target=self._read, name=f"zen-job-{stream}", daemon=True)
        self._thread.start()

    def _emit(self, data: bytes, newline: bool = False, final: bool = False) -> None:
        text = self._decoder.decode(data, final=newline or final)  # a line's end ends its last character too
        if text or newline:
            self._output.add(self._stream, text, newline)

    def _read(self) -> None:
        line_bytes, flush_s = self._limits.line_bytes, self._limits.flush_s
        buffer = bytearray()
        partial_since = 0.0
        try:
            fd = self._pipe.fileno()
            while not self._closed.is_set():
                wait = max(0.0, partial_since + flush_s - time.monotonic()) if buffer else 0.5
                ready, _, _ = select.select([fd], [], [], min(wait, 0.5))
                if not ready:
                    if buffer and time.monotonic() >= partial_since + flush_s:
                        self._emit(bytes(buffer))
                        buffer.clear()
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                if not buffer:
                    partial_since = time.monotonic()
                buffer += chunk
                while True:
                    end = buffer.find(b"\n", 0, line_bytes + 1)
                    if end >= 0:
                        self._emit(bytes(buffer[:end]), newline=True)
                        del buffer[: end + 1]
                    elif len(buffer) >= line_bytes:
                        self._emit(bytes(buffer[:line_bytes]))
                        del buffer[:line_bytes]
                    else:
                        break
                    partial_since = time.monotonic()
        except (OSError, ValueError):
            pass  # the pipe was closed under us (a child kept it open past the job's end)
        if buffer or self._decoder.getstate()[0]:
            self._emit(bytes(buffer), final=True)

    def finish(self, timeout_s: float = 2.0) -> None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():  # something outside the group still holds the pipe open
            self._closed.set()
            self._thread.join(1.0)
        try:
            self._pipe.close()
        except OSError:
            pass
