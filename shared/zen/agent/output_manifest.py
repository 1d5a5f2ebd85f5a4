"""The manifest of an attempt's outputs (``zen.agent.staging.AttemptData.upload``): ``_ZEN_OUTPUTS.json``, one small
object written LAST under the attempt's prefix (a gang's node: under its ``node-<rank>/``), once every output file is
stored, naming each with its size, CRC32C, MD5 and generation as Cloud Storage answered its upload, and the total. An
upload that failed, left a file out (unreadable, a name Cloud Storage cannot hold, a file of the manifest's own name) or
was cut (the VM's shutdown, the fence, a stop's deadline, its budget) writes none: a prefix without it is not whole
(as Hadoop's and Spark's ``_SUCCESS``, but for how the job ended: its ``status``). Docs: docs/reference/messages.md (inputs, outputs).
"""

from __future__ import annotations

import io
import json
import threading
from typing import Any, Callable, TypeVar

from zen.agent.output_files import Progress, send
from zen.core.gcs import OUTPUTS_MANIFEST
from zen.core.models import AgentStatus
from zen.core.text import escape_unstorable

MANIFEST = OUTPUTS_MANIFEST  # "_ZEN_OUTPUTS.json": its leading "_" kept apart by Hadoop's and Spark's readers of a prefix
VERSION = 1
T = TypeVar("T", bound=tuple)


def set_apart(files: list[T]) -> tuple[list[T], str | None]:
    """The output files (``(path under ZEN_OUTPUT_DIR, ...)``) but the job's own ``_ZEN_OUTPUTS.json`` at the top of
    ``ZEN_OUTPUT_DIR``, and why that one is left out (else None). The upload then fails once the rest went up (a job that
    exited 0 fails, saying so, never retried: a rerun writes it again), as for a name Cloud Storage cannot hold: sent,
    it would be overwritten by the manifest, or, the upload cut, a stale one of the job's would pass for Zen's."""
    kept = [item for item in files if item[0] != MANIFEST]
    return kept, (None if len(kept) == len(files) else f"{MANIFEST} (the name of Zen's manifest of the outputs: rename it)")


def missing(unlisted: list[str], unnamed: list[str], clashed: str | None, named: int) -> str | None:
    """Why the outputs are not all there (files not read, names Cloud Storage cannot hold: ``named`` of each at most,
    the manifest's name: ``set_apart``), or None."""
    parts = [f"could not read {', '.join(unlisted[:named])}"] if unlisted else []
    parts += [f"left out {clashed}"] if clashed else []
    if unnamed:
        more = f" and {len(unnamed) - named} more" if len(unnamed) > named else ""
        parts.append(f"Cloud Storage cannot name {', '.join(unnamed[:named])}{more}")
    return f"{'; '.join(parts)}: not uploaded" if parts else None


def entry(relative: str, blob: Any, size: int) -> dict[str, Any]:
    """One stored file as Cloud Storage answered its upload (the size sent, if the answer has none)."""
    return {"name": relative, "size": blob.size if blob.size is not None else size, "crc32c": blob.crc32c,
            "md5": blob.md5_hash, "generation": blob.generation}


def body(job_id: str, attempt: int, node: int | None, destination: str, files: list[dict[str, Any]],
         ended: AgentStatus | None = None, exit_code: int | None = None,
         skipped: list[tuple[str, str]] | None = None) -> bytes:
    """The manifest: the attempt, how its job ended (``status``, ``exit_code``: whole outputs are not a job that
    succeeded, as Hadoop's ``_SUCCESS`` is; a pipeline takes a SUCCEEDED attempt's), each file stored, and what was
    not sent by design (``skipped``: links and other files that are not regular ones, each with why). A gang's node
    knows its own end only (``node_status``, ``node_exit_code``): the job's is its nodes' together, decided by Zen
    (a node that exited 0 is in a FAILED job when another fails after it), so its ``status`` is none."""
    manifest: dict[str, Any] = {"version": VERSION, "job_id": job_id, "attempt": attempt}
    status = ended.value if ended is not None else None
    if node is not None:
        manifest.update(node=node, node_status=status, node_exit_code=exit_code)
        status, exit_code = None, None
    manifest.update(status=status, exit_code=exit_code, prefix=destination,
                    files=sorted(files, key=lambda item: item["name"]), total_files=len(files),
                    total_bytes=sum(int(item["size"]) for item in files),
                    skipped=[{"name": escape_unstorable(name), "why": why} for name, why in skipped or []])
    return json.dumps(manifest, indent=1).encode()


def write(bucket: Any, prefix: str, data: bytes, progress: Progress, cancel: threading.Event,
          transient: Callable[[Exception], bool]) -> None:
    """The manifest stored, last, through an outage too (``send``); the caller writes it only when nothing was left
    out and the transfer was not cut."""
    send(bucket.blob(prefix + MANIFEST), io.BytesIO(data), len(data), "application/json", progress, cancel, transient)
