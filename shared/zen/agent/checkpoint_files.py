"""What a checkpoint's save takes from ``ZEN_CHECKPOINT_DIR`` (``zen.agent.checkpoint``): its regular files (links and
special files are never followed nor saved), the empty folders, by name; and the paths a manifest may name. A file
whose name Cloud Storage cannot hold (not UTF-8, a carriage return or line feed, too long) is left out and said once: one
stray cache file sent every save to Cloud Storage, which refused it after the files before it, and no save landed."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable

from zen.core.text import unstorable_problem

Files = dict[str, tuple[int, int, int]]  # path under the folder -> (size, mtime_ns, inode)
MAX_OBJECT_NAME = 1024  # bytes of UTF-8: Cloud Storage refuses a longer object name


class Vanished(Exception):
    """A folder or file went while the directory was listed (a job replacing a checkpoint folder by another): what was
    listed is no state the job was ever in."""


def _vanished(error: OSError) -> None:
    if isinstance(error, (FileNotFoundError, NotADirectoryError)):  # gone (or now a file) since its parent's listing
        raise Vanished(f"folder {error.filename} went while ZEN_CHECKPOINT_DIR was listed") from error


def regular(directory: Path, left_out: set[str], note: Callable[[str], None], room: int | None = None) -> Files:
    """Every regular file under ``directory``; one whose name no object may have is left out (``note``d the first
    time, kept in ``left_out``), as is one whose path is over ``room`` bytes (what an object's name has left after
    the save's prefix: Cloud Storage refuses a name over 1,024 bytes, and one deep file failed every save). A folder
    or file that goes while the directory is listed raises ``Vanished``: it was skipped without a word, so a save
    taken as a job swapped ``ckpt-100/`` for ``ckpt-200/`` held neither model, landed, and deleted the save
    before it."""
    found: Files = {}
    for folder, _, names in os.walk(directory, onerror=_vanished):
        for name in names:
            path = Path(folder, name)
            relative = path.relative_to(directory).as_posix()
            if why := unsaveable(relative, room):
                if relative not in left_out:
                    left_out.add(relative)
                    shown = repr(os.fsencode(relative))[2:-1]  # its bytes, escaped as Python writes them
                    shown = shown if len(shown) <= 160 else f"{shown[:70]}...{shown[-70:]}"  # a deep one: its ends
                    note(f"checkpoint file '{shown}' is left out of the checkpoint: its name {why}")
                continue
            try:
                listed = path.lstat()
            except (FileNotFoundError, NotADirectoryError) as gone:  # since its folder was listed
                raise Vanished(f"{relative} went while ZEN_CHECKPOINT_DIR was listed") from gone
            except OSError:
                continue
            if stat.S_ISREG(listed.st_mode):
                found[relative] = (listed.st_size, listed.st_mtime_ns, listed.st_ino)
    return found


def empty_folders(directory: Path) -> list[str]:
    """The empty folders under ``directory`` (a job may expect the layout it left), saved by name in the manifest."""
    found = (Path(folder).relative_to(directory).as_posix() for folder, dirs, names in os.walk(directory)
             if not dirs and not names and Path(folder) != directory)
    return sorted(name for name in found if not unsaveable(name))


def unsaveable(relative: str, room: int | None = None) -> str | None:
    """Why no object may be named ``relative`` (Cloud Storage: UTF-8, no carriage return or line feed; at most
    ``room`` bytes here, the rest of its name being the save's prefix), or None."""
    if unstorable_problem(relative):
        return "is not UTF-8, which Cloud Storage's may not"
    if "\r" in relative or "\n" in relative:
        return "holds a line break, which Cloud Storage's may not"
    if room is not None and (size := len(relative.encode())) > room:
        return (f"is {size:,} bytes: with the checkpoint's prefix (as long as any attempt's and save's), its "
                f"object's name could pass Cloud Storage's {MAX_OBJECT_NAME:,}")
    return None


def parts(relative: str) -> list[str]:
    """A manifest's path as folder names, refused (``ValueError``) when it could leave the checkpoint's folder."""
    found = relative.split("/") if isinstance(relative, str) else []
    if not found or any(part in ("", ".", "..") for part in found):
        raise ValueError(f"bad checkpoint path {relative!r}")
    return found
