"""Which Cloud Storage object holds each file of a checkpoint's save (``zen.agent.checkpoint``). A save uploads only
the files that changed since the save (or the restore) that wrote the object holding them; its manifest names, per
file, the object that holds it (``object``, under the job's prefix; a manifest written before there was one names
``<generation><path>``) and when that object was written (``at``). So the save at a preemption's notice uploads what
the job wrote at the notice, not the whole folder again (an 80 MB weights file saved by the periodic save before
took the notice's budget, and the rerun lost the notice-time state).

An object is named again only while it is younger than ``REUSE_WITHIN_S``: the bucket's lifecycle rule deletes
objects ``checkpoint_retention_days`` (at least 1) after they were written, whatever manifest names them; an older
file is uploaded again, and an unchanged folder holding one is saved again (``aging``: the periodic saves keep an
unchanged checkpoint, its manifest with it, from the lifecycle). A save's objects still named by the next one are not
deleted with the save before."""

from __future__ import annotations

import json
from typing import Any, Callable

from zen.agent import checkpoint_files
from zen.agent.checkpoint_files import Files

SUPERSEDED = "which stays the latest"  # ends the words of a later attempt's manifest (``later``) but a claim's
CLAIMED = "whose saves alone are restored from now on"  # ends those of a claim: a rerun's that found no checkpoint
REUSE_WITHIN_S = 12 * 3600.0  # half the least checkpoint_retention_days (1 day): never an object the lifecycle deleted
AGING_SLACK_S = 1.0  # a periodic save due as an object turns REUSE_WITHIN_S old comes this much after it
AGING_RETRY_S = 3600.0  # such a save that failed is tried again this soon (every: up to a week), its failure told each time

Held = dict[str, tuple[str, float, tuple[int, int, int]]]  # path -> (its object under the prefix, written at, identity)


def object_of(manifest: dict[str, Any], item: dict[str, Any]) -> str:
    """The object (under the job's prefix) that holds a manifest's file; ``ValueError`` for a name no save writes."""
    named = item.get("object")
    if named is None:
        return str(manifest["generation"]) + str(item["path"])
    if not isinstance(named, str) or not named.startswith("attempt-"):
        raise ValueError(f"object {named!r} is no save's")
    checkpoint_files.parts(named)  # no empty, "." or ".." part
    return named


def written_at(manifest: dict[str, Any], item: dict[str, Any]) -> float:
    """When a manifest's file's object was written (epoch seconds; unknown: 0, never named again)."""
    at = item.get("at", manifest.get("saved_at"))
    return float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0


def aging(held: Held, now: float) -> bool:
    """Whether an object holding a file is too old to be named again: an unchanged checkpoint is saved again (its old
    objects uploaded anew) before the lifecycle deletes them, and the manifest with them."""
    return any(now - at >= REUSE_WITHIN_S for _, at, _ in held.values())


def next_save_in(held: Held, every: float, now: float, tried: bool) -> float:
    """Seconds until the next periodic save: ``every``, or less when an object holding a file turns too old to be named
    again first (``aging``): ``every`` may be up to a week and the lifecycle's age a day, and a checkpoint restored
    after a long wait in the queue may be near it. ``tried``: a save was just made; an object still that old (it
    failed) is tried again ``AGING_RETRY_S`` later, or at ``every`` if sooner (waiting ``every``, a week, the
    lifecycle deleted objects the manifest still named)."""
    due = min((at + REUSE_WITHIN_S - now for _, at, _ in held.values()), default=float(every))
    if tried and due <= 0:
        return min(float(every), AGING_RETRY_S)
    return min(float(every), max(0.0, due) + AGING_SLACK_S)


def reusable(held: Held, files: Files, now: float) -> dict[str, tuple[str, float]]:
    """The files of ``files`` an object already holds as they are now (same size, mtime and inode as when it was
    written or restored), young enough to be named again: path -> (object, written at)."""
    return {path: (name, at) for path, (name, at, identity) in held.items()
            if files.get(path) == identity and now - at < REUSE_WITHIN_S}


def items(files: Files, kept: dict[str, tuple[str, float]], generation: str, now: float) -> list[dict[str, Any]]:
    """A save's manifest entries: each file with the object that holds it, kept or uploaded now under ``generation``."""
    out = []
    for path in sorted(files):
        name, at = kept.get(path, (generation + path, now))
        out.append({"path": path, "size": files[path][0], "mtime_ns": files[path][1], "object": name, "at": at})
    return out


def held_by(manifest: dict[str, Any], files: Files) -> Held:
    """What each file of ``files`` (as listed now) is held by, per the manifest that names it (saved or restored)."""
    return {item["path"]: (object_of(manifest, item), written_at(manifest, item), files[item["path"]])
            for item in manifest["files"] if item["path"] in files}


def objects_of(prefix: str, manifest: dict[str, Any]) -> list[str]:
    """The objects (full names) a manifest names, one per file; ``KeyError``, ``TypeError`` or ``ValueError`` for a
    manifest no save wrote."""
    return [prefix + object_of(manifest, item) for item in manifest["files"]]


def named(bucket: Callable[[], Any], prefix: str, manifest: str) -> set[str] | None:
    """The objects (full names) the manifest ``prefix + manifest`` names (none without one); None when it cannot be read."""
    try:
        found = bucket().get_blob(prefix + manifest)
        latest = json.loads(found.download_as_bytes()) if found is not None else {"files": []}
        return set(objects_of(prefix, latest))
    except Exception:  # noqa: BLE001 - kept, all of them
        return None


def checked(manifest: Any) -> dict[str, Any]:
    """A manifest read, whose paths stay under the checkpoint's folder; ``ValueError`` (or ``KeyError``) if not one."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise ValueError("not a manifest")
    if not isinstance(manifest.get("folders") or [], list):
        raise ValueError("folders is not a list")
    if not isinstance(times := manifest.get("folder_times") or {}, dict):  # (a manifest from before them: none)
        raise ValueError("folder_times is not a mapping")
    for relative in [item["path"] for item in manifest["files"]] + list(manifest.get("folders") or []) + list(times):
        checkpoint_files.parts(relative)
    return manifest


def claim() -> dict[str, Any]:
    """A manifest of no save (no ``generation``), written as its own by a rerun that found none (with its ``attempt``):
    an earlier attempt's save (one Zen took for lost, running until its fence falls) is refused from then on."""
    return {"files": [], "folders": []}


def claim_over(manifest: dict[str, Any] | None, attempt: int) -> dict[str, Any]:
    """What a rerun that restores no save (none found, or its files gone for good) writes as its own: a ``claim``
    over none or an earlier attempt's manifest; a later attempt's (``attempt`` is a lost one) or its own as it is."""
    owner = manifest.get("attempt") if manifest is not None else None
    return manifest if manifest is not None and isinstance(owner, int) and owner >= attempt else claim()


def later(manifest: Any, attempt: int, refused: bool = True) -> str | None:
    """What stays the latest checkpoint when ``manifest`` is a later attempt's than ``attempt`` (None: it is not):
    its own save, another it restored, or none (a ``claim``). ``refused``: a save of ``attempt`` refused for it;
    else a save that failed otherwise, which says nothing here when the latest is ``attempt``'s own, restored since."""
    owner = manifest.get("attempt") if isinstance(manifest, dict) else None
    if not isinstance(owner, int) or isinstance(owner, bool) or owner <= attempt:
        return None
    if "generation" not in manifest:
        return f"attempt {owner} of the job has started since, finding no checkpoint, {CLAIMED}"
    by = manifest.get("saved_by", owner)
    if by == owner:
        return f"attempt {owner} of the job saved its checkpoint since, {SUPERSEDED}"
    if by == attempt and not refused:
        return None
    return f"attempt {owner} of the job restored {'this attempt' if by == attempt else f'attempt {by}'}'s checkpoint since, {SUPERSEDED}"


WORDS_TIMEOUT_S = 3.0  # each of the two requests: a small object; asked at a shutdown too, whose seconds are few


def latest_words(bucket: Callable[[], Any], name: str, attempt: int) -> str | None:
    """``later`` of the manifest ``name`` as it is now (best effort: unread, None); asked once a save failed."""
    try:
        found = bucket().get_blob(name, timeout=WORDS_TIMEOUT_S, retry=None)
        return later(json.loads(found.download_as_bytes(timeout=WORDS_TIMEOUT_S, retry=None)), attempt,
                     refused=False) if found else None
    except Exception:  # noqa: BLE001 - the words of a failure, said without it
        return None


def delete(bucket: Callable[[], Any], names: list[str]) -> None:
    """Best effort: a leftover costs storage only (the bucket's lifecycle ends it), never a wrong restore."""
    for name in names:
        try:
            bucket().delete_blob(name)
        except Exception:  # noqa: BLE001
            pass
