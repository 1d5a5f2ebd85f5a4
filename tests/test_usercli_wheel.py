"""The deploy as docs/how-to/deploy.md documents it: the packaged wheel, installed into a clean virtualenv that
holds nothing but the runtime requirements, runs `zen db migrate` and `zen jobs list` against a real
Postgres, and the commands that need the local stand-ins say so in one line. Every module the wheel and
the functions' archive ship imports there, without the development-only ``zen_dev``.

The clean virtualenv reuses the packages already installed here (no network): a directory holding
only the runtime requirements and what they need, found through their metadata, is put on its path
by a .pth file. Local-only packages (pgserver, rich) and the repository's source are not on it.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import ROOT


def _runtime_closure() -> list[metadata.Distribution]:
    """The distributions requirements.txt names, and everything they require, as installed here."""
    wanted = [re.split(r"[=<>!~\[; ]", line.split("#")[0].strip(), maxsplit=1)[0]
              for line in (ROOT / "requirements.txt").read_text().splitlines() if line.split("#")[0].strip()]
    seen: dict[str, metadata.Distribution] = {}
    while wanted:
        name = wanted.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen[name] = dist = metadata.distribution(name)
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                wanted.append(requirement.name)
    return list(seen.values())


def _runtime_site(target: Path) -> Path:
    """A directory of links to the top-level modules of the runtime closure only."""
    target.mkdir()
    for dist in _runtime_closure():
        for file in dist.files or []:
            top = file.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            source = Path(dist.locate_file(top))
            link = target / top
            if source.exists() and not link.exists():
                link.symlink_to(source)
    return target


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "package.py"), "--out", str(base / "dist")],
                   check=True, capture_output=True)
    [wheel] = (base / "dist").glob("zen-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "zen_runtime_requirements.pth").write_text(f"{_runtime_site(base / 'runtime')}\n")
    return venv


@pytest.fixture
def empty_database(empty_db):
    return f"postgresql://{empty_db.user}@/{empty_db.database}?host={os.path.dirname(empty_db.unix_sock)}"


def _zen(venv: Path, cwd: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    clean = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(cwd), "USER": "alice", **env}
    return subprocess.run([str(venv / "bin" / "zen"), *argv], cwd=cwd, env=clean, capture_output=True, text=True,
                          timeout=120)


def test_the_clean_venv_has_only_the_wheel_and_the_runtime_requirements(wheel_venv, tmp_path):
    probe = ("import importlib.util as u, zen; "
             "print(zen.__file__); print([m for m in ('pgserver', 'rich', 'zen_dev') if u.find_spec(m)])")
    out = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", probe], cwd=tmp_path, env={"PATH": "/usr/bin"},
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith(str(wheel_venv)) and out[1] == "[]"


def test_deploy_step_migrate_then_list_jobs_from_the_wheel(wheel_venv, empty_database, tmp_path):
    migrate = _zen(wheel_venv, tmp_path, "db", "migrate", ZEN_DATABASE_URL=empty_database)
    assert migrate.returncode == 0, migrate.stderr
    assert migrate.stdout.startswith("applied: ") and "initial" in migrate.stdout
    again = _zen(wheel_venv, tmp_path, "db", "migrate", ZEN_DATABASE_URL=empty_database)
    assert again.stdout.strip() == "schema is up to date"
    listing = _zen(wheel_venv, tmp_path, "jobs", "list", ZEN_DATABASE_URL=empty_database)
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.split()[:5] == ["JOB_ID", "USER", "QUEUE", "CLUSTER", "REGION"]
    clusters = _zen(wheel_venv, tmp_path, "clusters")
    assert clusters.returncode == 0 and "1xl4" in clusters.stdout
    assert not (tmp_path / ".zen").exists()


def test_local_only_commands_say_what_they_need_from_the_wheel(wheel_venv, tmp_path):
    for argv in (["local", "up"], ["demo"], ["simulate", "--scenario", "x"]):
        result = _zen(wheel_venv, tmp_path, *argv)
        assert result.returncode == 1, (argv, result.stderr)
        assert result.stderr.startswith("zen: ") and "development checkout" in result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    listed = _zen(wheel_venv, tmp_path, "--help").stdout
    assert "jobs" in listed and not {"local", "demo", "simulate"} & set(listed.split()), listed
    nothing = _zen(wheel_venv, tmp_path, "jobs", "list")
    assert nothing.returncode == 1 and "no local stack is running" in nothing.stderr
    assert not (tmp_path / ".zen").exists()


# Imports every module of the ``zen`` package found first on the path (and ``main``, the functions'
# entry points, when it is there); prints where zen came from, the modules and what failed.
IMPORT_EVERYTHING = """
import importlib, importlib.util, json, pkgutil, sys, traceback
import zen
names = ['zen'] + [m.name for m in pkgutil.walk_packages(zen.__path__, 'zen.') if m.name.rpartition('.')[2] != '__main__']
if importlib.util.find_spec('main') is not None:
    names.append('main')
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception:
        failed[name] = traceback.format_exc(limit=-1).strip().splitlines()[-1]
dev = sorted(m for m in sys.modules if m.split('.')[0] == 'zen_dev') + (['zen_dev'] if importlib.util.find_spec('zen_dev') else [])
print(json.dumps({'zen': zen.__file__, 'modules': names, 'failed': failed, 'zen_dev': dev}))
"""


def _import_everything(python: Path, cwd: Path) -> dict:
    done = subprocess.run([str(python), "-c", IMPORT_EVERYTHING], cwd=cwd, env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_module_of_the_wheel_imports_without_zen_dev(wheel_venv, tmp_path):
    """The agent's wheel (``zen agent``, ``zen db migrate`` on a VM): nothing it ships reaches dev-only code."""
    found = _import_everything(wheel_venv / "bin" / "python", tmp_path)
    assert found["zen"].startswith(str(wheel_venv))
    assert {"zen.app", "zen.agent.agent", "zen.cli.main", "zen.store.db"} <= set(found["modules"])
    assert found["failed"] == {} and found["zen_dev"] == []


def test_every_module_of_the_functions_archive_imports_without_zen_dev(wheel_venv, tmp_path):
    """The Cloud Functions' source, unpacked as Cloud Functions does, with the runtime requirements only."""
    with zipfile.ZipFile(wheel_venv.parent / "dist" / "zen-functions.zip") as archive:
        archive.extractall(tmp_path)
    found = _import_everything(wheel_venv / "bin" / "python", tmp_path)
    assert found["zen"].startswith(str(tmp_path))
    assert {"main", "zen.app", "zen.jobs.service", "zen.scaling.manager"} <= set(found["modules"])
    assert found["failed"] == {} and found["zen_dev"] == []
