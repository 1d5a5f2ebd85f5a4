"""What a checkpoint's save takes from ``ZEN_CHECKPOINT_DIR`` (``zen.agent.checkpoint``): its regular files (links and
special files are never followed nor saved), the empty folders, by name; and the paths a manifest may name. A file
whose name Cloud Storage cannot hold (not UTF-8, a carriage return or line feed) is left out and said once: one
stray cache file sent every save to Cloud Storage, which refused it after the files before it, and no save landed."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable

from zen.core.text import unstorable_problem

Files = dict[str, tuple[int, int, int]]  # path under the folder -> (size, mtime_ns, inode)


def regular(directory: Path, left_out: set[str], note: Callable[[str], None]) -> Files:
    """Every regular file under ``directory``; one whose name no object may have is left out (``note``d the first
    time, kept in ``left_out``)."""
    found: Files = {}
    for folder, _, names in os.walk(directory):
        for name in names:
            path = Path(folder, name)
            relative = path.relative_to(directory).as_posix()
            if why := unsaveable(relative):
                if relative not in left_out:
                    left_out.add(relative)
                    shown = repr(os.fsencode(relative))[2:-1]  # its bytes, escaped as Python writes them
                    note(f"checkpoint file '{shown}' is left out of the checkpoint: its name {why}, which Cloud "
                         "Storage's may not")
                continue
            try:
                listed = path.lstat()
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


def unsaveable(relative: str) -> str | None:
    """Why no object may be named ``relative`` (Cloud Storage: UTF-8, no carriage return or line feed), or None."""
    if unstorable_problem(relative):
        return "is not UTF-8"
    return "holds a line break" if "\r" in relative or "\n" in relative else None


def parts(relative: str) -> list[str]:
    """A manifest's path as folder names, refused (``ValueError``) when it could leave the checkpoint's folder."""
    found = relative.split("/") if isinstance(relative, str) else []
    if not found or any(part in ("", ".", "..") for part in found):
        raise ValueError(f"bad checkpoint path {relative!r}")
    return found
