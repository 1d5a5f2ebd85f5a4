"""The running local stack's record (``.zen/stack.json``) and the environment that points a client
at it: what every ``zen`` command reads first (``zen.cli.main``), so it imports nothing heavy; the
stack itself (``zen_dev.local.stack``) starts the stand-ins and writes the record."""

from __future__ import annotations

import json
import os
from pathlib import Path


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` exited and waits for its parent to reap it (Linux: state Z in /proc): it is gone, and
    ``zen local down`` waited out its whole hand-back and grace (40 s) for a stand-in that had ended."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS), or gone meanwhile
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def stack_file(home: Path) -> Path:
    return home / "stack.json"


def read_stack(home: Path) -> dict | None:
    """The running stack's record, or None (a record whose processes are all gone is removed)."""
    path = stack_file(home)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if not any(process_alive(p["pid"]) for p in record["processes"]):
        path.unlink()
        return None
    return record


def running_home(start: Path | None = None) -> Path | None:
    """The ``.zen`` of the stack running in ``start`` (default: this directory) or the nearest folder
    above it, as git finds its repository: `zen` run from a subfolder talks to that stack."""
    here = (start or Path.cwd()).resolve()
    return next((folder / ".zen" for folder in (here, *here.parents) if read_stack(folder / ".zen")), None)


def named_home(folder: Path) -> Path:
    """The stack's folder that ``zen local down --home FOLDER`` means: FOLDER when it is one (``.zen``, or holding a
    record or a Postgres, as the demo's ``.zen/demo``), else the folder ``zen local up`` ran in, given as such (it
    said "no local stack is running" and left that stack up): its ``.zen``, or the demo's left running there. Never
    a folder above: a stack running there is not the one named."""
    if folder.name == ".zen" or stack_file(folder).exists() or (folder / "pgdata").exists():
        return folder
    home, demo = folder / ".zen", folder / ".zen" / "demo"
    return demo if read_stack(demo.resolve()) and not read_stack(home.resolve()) else home


def stack_env(home: Path | None = None) -> dict[str, str]:
    """Environment that points a client (``zen submit``, ``zen jobs``) at the running stack (``home``,
    else the one :func:`running_home` finds). A stopped stack's job output stays readable (``zen
    logs``) from its folder or a subfolder, unless the client is pointed at a database."""
    home = home or running_home()
    record = read_stack(home) if home is not None else None
    if record:
        return dict(record["env"])
    here = Path.cwd().resolve()  # a stopped stack's output: in this folder's .zen or the nearest one above
    found = [home / "joblogs"] if home is not None else [folder / ".zen" / "joblogs" for folder in (here, *here.parents)]
    logs = next((folder for folder in found if folder.is_dir()), None)
    if logs is not None and not (os.environ.get("ZEN_DATABASE_URL") or os.environ.get("ZEN_CLOUDSQL_INSTANCE")):
        return {"ZEN_JOB_LOGS_DIR": str(logs.resolve())}
    return {}
