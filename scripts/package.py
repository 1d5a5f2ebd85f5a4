"""Build what terraform deploys: the functions' source archive and the VM agent's wheel.

    python scripts/package.py [--out dist] [--config zen.yaml]

Writes into ``--out`` (default ``dist/``):

- ``zen-functions.zip``: ``main.py`` (functions/main.py), ``requirements.txt`` (the runtime pins:
  requirements.txt, then requirements-functions.txt, then what they require at constraints.txt's versions) and the ``zen`` package without its local-only
  parts; with ``--config``, the configuration as ``zen_config.yaml`` (terraform then sets ``ZEN_CONFIG``).
- ``zen-<version>-py3-none-any.whl``: the same ``zen`` package for the agent VMs, with the runtime
  pins as its dependencies and the ``zen`` command (``zen agent``, ``zen db migrate``).
- ``manifest.json``: file names, their SHA-256 and the configuration's SHA-256 (or null). Terraform
  names the uploaded objects after these hashes, so any change to the code redeploys.

Both archives are reproducible: sorted entries, fixed timestamps and modes, so the hash changes only
when the content does. Only the ``zen`` package ships: the development-only parts (the stand-ins and
local stack, the simulator, the demo, the embedded Postgres) are the separate ``zen_dev`` package,
which ``zen`` imports only inside the ``zen`` command's local-only functions (``tests/test_layering.py``);
``tests/test_usercli_wheel.py`` imports every module of both archives without it.
"""

from __future__ import annotations

import argparse
import os
import base64
import hashlib
import json
import re
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "shared" / "zen"
FUNCTIONS_MAIN = ROOT / "functions" / "main.py"
REQUIREMENTS = ROOT / "requirements.txt"
AGENT_REQUIREMENTS = ROOT / "requirements-agent.txt"  # the wheel only: google-cloud-logging
FUNCTIONS_REQUIREMENTS = ROOT / "requirements-functions.txt"  # the functions only: billing, secret manager, logging
CONSTRAINTS = ROOT / "constraints.txt"  # every package's pin, transitive ones included (the wheel's closure)

FUNCTIONS_ARCHIVE = "zen-functions.zip"
CONFIG_NAME = "zen_config.yaml"
# Packages only a developer machine has; their presence in a deployed requirements file is a bug.
LOCAL_ONLY_PACKAGES = ("pgserver", "pytest", "hypothesis", "rich", "playwright")
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry


def library_files() -> list[tuple[str, Path]]:
    """(path inside the archive, file) for the deployable part of the ``zen`` package."""
    files = []
    for path in sorted(LIBRARY.rglob("*")):
        relative = path.relative_to(LIBRARY).as_posix()
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        files.append((f"zen/{relative}", path))
    return files


def runtime_requirements(path: Path = REQUIREMENTS) -> list[str]:
    """The pinned lines of a requirements file (comments and blanks dropped); refuses local-only ones."""
    lines = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name = re.split(r"[=<>!~\[; ]", line, maxsplit=1)[0].lower()
        if name in LOCAL_ONLY_PACKAGES:
            raise SystemExit(f"{path.name} lists the local-only package {name}; it must not be deployed")
        lines.append(line)
    return lines


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_closure(lines: list[str]) -> list[str]:
    """``lines`` (pinned requirements), then every package they require, transitively (extras and markers
    followed as installed here), each pinned at constraints.txt's version: the wheel's ``Requires-Dist``, so
    that ``pip install`` of it installs the versions the tests ran with, not the newest. Fails when a package
    of the closure is not installed here (run `make venv`) or constraints.txt does not pin it."""
    from importlib import metadata

    from packaging.requirements import Requirement

    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pins[_normal(Requirement(line).name)] = line
    direct = [Requirement(line) for line in lines]
    wanted = [(r.name, frozenset(r.extras)) for r in direct]
    seen: dict[str, set[str]] = {}
    while wanted:
        name, extras = wanted.pop()
        key = _normal(name)
        new = ({""} | set(extras)) - seen.get(key, set())
        if not new:
            continue
        seen.setdefault(key, set()).update(new)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name}, which the runtime requirements need, is not installed here: run `make venv`")
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or any(requirement.marker.evaluate({"extra": e}) for e in new):
                wanted.append((requirement.name, frozenset(requirement.extras)))
    transitive = sorted(set(seen) - {_normal(r.name) for r in direct})
    unpinned = [name for name in transitive if name not in pins]
    if unpinned:
        raise SystemExit(f"constraints.txt pins none of {', '.join(unpinned)}, which the runtime requirements need")
    return lines + [pins[name] for name in transitive]


def _write(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = ((0o755 if executable else 0o644) | 0o100000) << 16
    archive.writestr(info, data)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_functions_archive(out: Path, config: Path | None) -> Path:
    target = out / FUNCTIONS_ARCHIVE
    runtime_requirements()  # refuse a local-only package before writing anything
    runtime_requirements(FUNCTIONS_REQUIREMENTS)
    direct = runtime_requirements() + runtime_requirements(FUNCTIONS_REQUIREMENTS)
    transitive = pinned_closure(direct)[len(direct):]  # installed at the tested versions, as the wheel's
    requirements = (REQUIREMENTS.read_bytes() + b"\n" + FUNCTIONS_REQUIREMENTS.read_bytes()
                    + b"\n# What the above require, pinned at constraints.txt's versions (scripts/package.py)\n"
                    + "".join(f"{line}\n" for line in transitive).encode())
    entries = [("main.py", FUNCTIONS_MAIN.read_bytes()), ("requirements.txt", requirements)]
    entries += [(name, path.read_bytes()) for name, path in library_files()]
    if config is not None:
        entries.append((CONFIG_NAME, config.read_bytes()))
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in sorted(entries):
            _write(archive, name, data)
    return target


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build_agent_wheel(out: Path) -> Path:
    """A pure-Python wheel (PEP 427) of the deployable ``zen`` package, built without setuptools.

    pyproject.toml declares no dependencies, so the wheel's ``Requires-Dist`` come from the
    runtime pins in requirements.txt plus requirements-agent.txt (the Cloud Logging client that ships
    job output), and everything those require pinned at constraints.txt's versions (``pinned_closure``):
    ``pip install`` on the VM, or on a laptop, then installs exactly what the tests ran with.
    """
    version = project_version()
    dist_info = f"zen-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        "Name: zen",
        f"Version: {version}",
        "Summary: Zen: a multi-region GPU job scheduler for Google Cloud (deployable part)",
        "Requires-Python: >=3.11",
        *[f"Requires-Dist: {requirement}"
          for requirement in pinned_closure(runtime_requirements() + runtime_requirements(AGENT_REQUIREMENTS))],
    ]
    wheel_meta = ["Wheel-Version: 1.0", "Generator: zen scripts/package.py", "Root-Is-Purelib: true",
                  "Tag: py3-none-any"]
    entries = [(name, path.read_bytes()) for name, path in library_files()]
    entries += [
        (f"{dist_info}/METADATA", ("\n".join(metadata) + "\n").encode()),
        (f"{dist_info}/WHEEL", ("\n".join(wheel_meta) + "\n").encode()),
        (f"{dist_info}/entry_points.txt", b"[console_scripts]\nzen = zen.cli.main:main\n"),
        (f"{dist_info}/top_level.txt", b"zen\n"),
    ]
    entries.sort()
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in entries]
    record.append(f"{dist_info}/RECORD,,")
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    target = out / f"zen-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in entries:
            _write(archive, name, data)
    return target


def build(out: Path, config: Path | None = None) -> dict:
    """Build both archives and the manifest into ``out``; return the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    if config is not None:
        # Fail here rather than at the first event: the functions would refuse this file too.
        sys.path.insert(0, str(ROOT / "shared"))
        from zen.core.config import load_config

        loaded = load_config(config)
        project = os.environ.get("ZEN_PROJECT") or loaded.project  # as the functions run: terraform sets ZEN_PROJECT
        if project != "zen-local":  # the shipped stand-in: the project deployed to is not known here
            loaded.for_project(project)  # the notifier's secrets, that project's
    functions = build_functions_archive(out, config)
    wheel = build_agent_wheel(out)
    manifest = {
        "functions_archive": functions.name,
        "functions_sha256": sha256_file(functions),
        "agent_wheel": wheel.name,
        "agent_wheel_sha256": sha256_file(wheel),
        "config": CONFIG_NAME if config is not None else None,
        "config_sha256": sha256_file(config) if config is not None else None,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="output directory (default: dist/)")
    parser.add_argument("--config", type=Path, default=None,
                        help="a Zen YAML configuration to ship with the functions (default: the packaged default)")
    args = parser.parse_args(argv)
    manifest = build(args.out, args.config)
    print(f"{args.out / manifest['functions_archive']}  sha256={manifest['functions_sha256']}")
    print(f"{args.out / manifest['agent_wheel']}  sha256={manifest['agent_wheel_sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
