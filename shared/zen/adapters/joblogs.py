"""Job output as log entries: what one entry is (``OutputEntry``: job, attempt, stream, VM, ``seq``; the
attempt's last entry ``final``), and the local directory of JSON-lines files it is written to and read
back from when ``ZEN_JOB_LOGS_DIR`` is set. ``zen.adapters.cloud_logging`` holds the Cloud Logging side
and the choice between the two (this module knows nothing of Cloud Logging).

Where output goes and what an entry holds: docs/reference/agent.md, "Job output".
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Protocol, runtime_checkable

LOG_NAME = "zen-jobs"
DIR_ENV = "ZEN_JOB_LOGS_DIR"
ENDPOINT_ENV = "ZEN_LOGGING_ENDPOINT"
STREAMS = ("stdout", "stderr", "zen")  # zen: lines the agent adds (limits, the end of the attempt)


@dataclass(frozen=True)
class OutputEntry:
    job_id: str
    attempt: int
    stream: str
    vm: str
    seq: int
    time: str  # ISO 8601, UTC, when the agent read the line
    text: str
    final: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping) -> "OutputEntry":
        return cls(job_id=str(data["job_id"]), attempt=int(data["attempt"]), stream=str(data["stream"]),
                   vm=str(data.get("vm") or ""), seq=int(data["seq"]), time=str(data.get("time") or ""),
                   text=str(data.get("text") or ""), final=bool(data.get("final", False)))


class Sink(Protocol):
    """Where the agent writes entries (one attempt's, in ``seq`` order). Raises ``SinkError``."""

    def write(self, entries: list[OutputEntry]) -> None: ...


class Reader(Protocol):
    """Entries of one job, each returned once: every call gives what arrived since the last one,
    sorted by (attempt, seq)."""

    def new_entries(self, job_id: str, attempt: int | None = None) -> list[OutputEntry]: ...


@runtime_checkable
class ReadsPast(Protocol):
    """A reader that can be told where a consumer already is, so it does not list those lines again."""

    def read_past(self, attempt: int, read: Mapping[str, int]) -> None: ...


class SinkError(Exception):
    """The sink refused or could not take a batch (the caller keeps it and retries)."""


class SinkRefused(SinkError):
    """The sink refuses the batch as invalid (an entry too large): sending it again cannot help."""


class LocalSink:
    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def path(self, job_id: str, attempt: int) -> Path:
        return attempt_path(self.directory, job_id, attempt)

    def write(self, entries: list[OutputEntry]) -> None:
        by_file: dict[Path, list[str]] = {}
        for entry in entries:
            by_file.setdefault(self.path(entry.job_id, entry.attempt), []).append(entry.to_json() + "\n")
        try:
            for path, lines in by_file.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a", encoding="utf-8") as out:
                    out.write("".join(lines))
        except OSError as exc:
            raise SinkError(f"cannot write job output under {self.directory}: {exc}") from None


def attempt_path(directory: Path, job_id: str, attempt: int) -> Path:
    return directory / job_id / f"attempt-{attempt}.jsonl"


class LocalReader:
    """Reads the local sink's files, remembering how far it got in each (complete lines only: the
    agent may be writing the next batch)."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self._offsets: dict[Path, int] = {}

    def attempts(self, job_id: str) -> list[int]:
        folder = self.directory / job_id
        if not folder.is_dir():
            return []
        numbers = [p.name[len("attempt-"):-len(".jsonl")] for p in folder.glob("attempt-*.jsonl")]
        return sorted(int(n) for n in numbers if n.isdigit())

    def new_entries(self, job_id: str, attempt: int | None = None) -> list[OutputEntry]:
        entries: list[OutputEntry] = []
        for number in ([attempt] if attempt is not None else self.attempts(job_id)):
            path = attempt_path(self.directory, job_id, number)
            try:
                with open(path, "rb") as source:
                    source.seek(self._offsets.get(path, 0))
                    data = source.read()
            except FileNotFoundError:
                continue
            complete = data[: data.rfind(b"\n") + 1]
            self._offsets[path] = self._offsets.get(path, 0) + len(complete)
            # Entries end at b"\n" alone: a job's text may hold what str.splitlines() also ends lines at (U+2028,
            # U+2029, U+0085, written raw), which cut an entry in two and failed the whole read.
            for raw in complete.split(b"\n"):
                if raw.strip():
                    entries.append(OutputEntry.from_dict(json.loads(raw.decode("utf-8", errors="replace"))))
        return sorted(entries, key=lambda e: (e.attempt, e.seq))

