"""What a checkpoint's save takes from ``ZEN_CHECKPOINT_DIR`` (``zen.agent.checkpoint``): its regular files (links and
special files are never followed nor saved, each folder opened from its parent, never through a link), the empty
folders, by name; and the paths a manifest may name. A file
whose name Cloud Storage cannot hold (not UTF-8, a carriage return or line feed, too long) is left out and said once: one
stray cache file sent every save to Cloud Storage, which refused it after the files before it, and no save landed. A
folder or file the agent cannot read (the job runs as nobody, the agent as zen-agent: a folder ``tempfile.mkdtemp`` made,
0700) fails the save, named (``Unreadable``): it was skipped without a word, and a save without it landed."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from zen.core.text import unstorable_problem

Files = dict[str, tuple[int, int, int]]  # path under the folder -> (size, mtime_ns, inode)
MAX_OBJECT_NAME = 1024  # bytes of UTF-8: Cloud Storage refuses a longer object name


class Vanished(Exception):
    """A folder or file went while the directory was listed (a job replacing a checkpoint folder by another): what was
    listed is no state the job was ever in."""


class Unreadable(Exception):
    """A folder or file the agent may not read (made by the job's user for itself alone): a save without it would hold
    another state than the job's, and delete the save before it that held it."""


@dataclass(frozen=True)
class Listing:
    """What a save takes: the regular files (``Files``) and the empty folders, by name (a job may expect the layout it
    left). Equal listings: nothing changed since (a folder made or removed alone is a change: it was not saved)."""

    files: Files
    folders: tuple[str, ...] = ()
    # Each folder's modification time (ns), restored with it: no change of its own (its files' are the changes).
    times: dict[str, int] = field(default_factory=dict, compare=False)

    def __bool__(self) -> bool:
        return bool(self.files or self.folders)


def _opened(name: str, parent: int | None, shown: Path, inner: str = "") -> int:
    """The folder ``name`` (in the folder open as ``parent``; ``inner`` under ZEN_CHECKPOINT_DIR, "" the folder itself)
    opened, never through a link; ``Unreadable`` when the agent may not read it (skipped, a save without its files
    would land, and delete the save before that held them)."""
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            raise Unreadable(unreadable(f"folder {inner}" if inner else "ZEN_CHECKPOINT_DIR", exc)) from exc
        try:  # gone, a file or a link now, since its parent's listing (a link followed: a save took the VM's files)
            link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        raise Vanished(f"folder {shown} {'was replaced by a link' if link else 'went'} while ZEN_CHECKPOINT_DIR was "
                       f"listed") from exc


def walk(directory: Path) -> Iterator[tuple[str, list[str], list[str], int]]:
    """Each folder under ``directory`` (its path relative to it, "" the top; its folders; its other names; an open
    descriptor of it), each opened from its parent's descriptor and never through a link: ``os.walk`` checked a
    folder was no link, then read it by path, so one a job swapped for a link to a folder of the VM in between was
    followed, and the VM's files saved and restored into the job's next attempt. A folder is opened as it is read,
    depth first, so the descriptors held are one per level: a folder's subfolders all opened at once took one each,
    and one of more than the agent's open-file limit (1,024) failed every save as unreadable."""
    held: list[tuple[str, int, Iterator[str]]] = []  # the top to the folder read: each one's subfolders not read yet
    try:
        fd: int | None = _opened(str(directory), None, directory)
        relative = ""
        while True:
            if fd is not None:  # a folder just opened: read
                held.append((relative, fd, iter(())))
                with os.scandir(fd) as entries:
                    found = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
                folders = sorted(name for name, is_folder in found if is_folder)
                yield relative, folders, sorted(name for name, is_folder in found if not is_folder), fd
                held[-1] = (relative, fd, reversed(folders))  # (the last first, as they were read before)
            parent, parent_fd, left = held[-1]
            if (name := next(left, None)) is None:  # its subfolders all read: closed, and its parent's next one read
                held.pop()
                os.close(parent_fd)
                if not held:
                    return
                fd = None
                continue
            relative = f"{parent}/{name}" if parent else name
            fd = _opened(name, parent_fd, directory / relative, relative)
    finally:
        for _, fd, _ in held:
            os.close(fd)


def listing(directory: Path, left_out: set[str], note: Callable[[str], None], room: int | None = None) -> Listing:
    """Every regular file under ``directory``, its empty folders and each folder's modification time (a job that
    resumes from its newest checkpoint folder by time finds that one after a restore); a file whose name no object
    may have is left out (``note``d the first time, kept in ``left_out``), as is one whose path is over ``room``
    bytes (what an object's name has left after the save's prefix: Cloud Storage refuses a name over 1,024 bytes,
    and one deep file failed every save). A folder or file that goes while the directory is listed raises
    ``Vanished``: it was skipped without a word, so a save taken as a job swapped ``ckpt-100/`` for ``ckpt-200/``
    held neither model, landed, and deleted the save before it. One the agent may not read raises ``Unreadable``,
    for the same reason."""
    found: Files = {}
    empty: list[str] = []
    times: dict[str, int] = {}
    for folder, folders, names, fd in walk(directory):
        if folder and not folders and not names and not unsaveable(folder):
            empty.append(folder)
        if folder and not unsaveable(folder, room):
            times[folder] = os.fstat(fd).st_mtime_ns
        for name in names:
            relative = f"{folder}/{name}" if folder else name
            if why := unsaveable(relative, room):
                if relative not in left_out:
                    left_out.add(relative)
                    shown = repr(os.fsencode(relative))[2:-1]  # its bytes, escaped as Python writes them
                    shown = shown if len(shown) <= 160 else f"{shown[:70]}...{shown[-70:]}"  # a deep one: its ends
                    note(f"checkpoint file '{shown}' is left out of the checkpoint: its name {why}")
                continue
            try:
                listed = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError) as gone:  # since its folder was listed
                raise Vanished(f"{relative} went while ZEN_CHECKPOINT_DIR was listed") from gone
            except OSError as exc:  # its folder readable, not searchable (r--): skipped, a save would leave it out
                raise Unreadable(unreadable(f"file {relative}", exc)) from exc
            if stat.S_ISREG(listed.st_mode):
                found[relative] = (listed.st_size, listed.st_mtime_ns, listed.st_ino)
    return Listing(found, tuple(sorted(empty)), times)


def unreadable(what: str, exc: OSError) -> str:
    """Why a save of ZEN_CHECKPOINT_DIR stops at ``what`` (a folder or file of it), which the agent may not read."""
    return (f"{what} cannot be read by Zen's agent ({exc.strerror or exc}): ZEN_CHECKPOINT_DIR's folders and files "
            f"must be readable by all (a folder tempfile.mkdtemp makes is its owner's alone: chmod it 755)")


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
