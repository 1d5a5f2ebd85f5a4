"""Read terraform/ with python-hcl2 into plain dicts, for the wiring tests.

python-hcl2 (8.x) keeps HCL's quoting: block labels and string literals arrive as ``'"name"'``,
expressions as ``'${...}'``, and comments as ``__comments__``. ``normalize`` strips the quotes of
literals (unescaping ``\\"``), drops comments and block markers, and leaves expressions as text.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import hcl2

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"
_META_KEYS = {"__is_block__", "__comments__", "__start_line__", "__end_line__"}


def unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text


def normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {unquote(k): normalize(v) for k, v in value.items() if k not in _META_KEYS}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str):
        return unquote(value)
    return value


def load(path: Path) -> dict[str, Any]:
    """The file as plain dicts, made anew at each call (a test may change them); parsed once a worker for each
    version of the file (its path, size and change time): python-hcl2's parser took about half of the terraform
    tests' CPU, each test module parsing the same files again."""
    stat = path.stat()
    return normalize(_parsed(str(path.resolve()), stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=256)
def _parsed(path: str, size: int, changed_ns: int) -> dict[str, Any]:
    with open(path) as handle:
        return hcl2.load(handle)


def strings(value: Any) -> Iterator[str]:
    """Every string (literal or expression) inside a parsed value, comments excluded."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, str):
        yield value


def block(value: Any) -> dict[str, Any]:
    """A nested block (``[ {...} ]`` in parsed form) as its dict; ``{}`` when absent."""
    if isinstance(value, list):
        return value[0] if value else {}
    return value or {}


@dataclass
class Module:
    """The parsed terraform/ directory."""

    files: dict[str, dict[str, Any]]
    resources: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    data: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path = TERRAFORM) -> "Module":
        module = cls(files={p.name: load(p) for p in sorted(directory.glob("*.tf"))})
        for parsed in module.files.values():
            for entry in parsed.get("resource", []):
                for rtype, named in entry.items():
                    for name, body in named.items():
                        module.resources[(rtype, name)] = body
            for entry in parsed.get("data", []):
                for dtype, named in entry.items():
                    for name, body in named.items():
                        module.data[(dtype, name)] = body
            for entry in parsed.get("variable", []):
                module.variables.update(entry)
            for entry in parsed.get("locals", []):
                module.locals.update(entry)
            for entry in parsed.get("output", []):
                module.outputs.update(entry)
        return module

    def resources_of(self, rtype: str) -> dict[str, dict[str, Any]]:
        return {name: body for (t, name), body in self.resources.items() if t == rtype}

    def all_strings(self) -> list[str]:
        return [s for parsed in self.files.values() for s in strings(parsed)]


def references(texts: list[str], pattern: str) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for text in texts:
        for match in re.finditer(pattern, text):
            found.add(match.groups())
    return found


def top_block(path: Path, header: str) -> str:
    """The text of the top-level block of ``path`` opening with the line ``header`` (``variable "x" {``), to its
    closing ``}``."""
    found = re.search(rf"^{re.escape(header)}\n.*?^\}}\n", path.read_text(), re.S | re.M)
    assert found, header
    return found.group(0)


def console(folder: Path, expression: str, var_file: str | None = None) -> subprocess.CompletedProcess:
    """``terraform console`` in ``folder`` (with ``-var-file=var_file``) given ``expression``; its result as run."""
    return subprocess.run(["terraform", "console", *([f"-var-file={var_file}"] if var_file else [])],
                          input=expression + "\n", cwd=folder, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"})


def main_local(name: str) -> str:
    """The source of main.tf's multi-line map ``local.<name>`` (``  name = {`` to its closing ``  }``)."""
    return re.search(rf"\n(  {name} = \{{\n.*?\n  \}})\n", (TERRAFORM / "main.tf").read_text(), re.S).group(1)


def render_local(name: str, zen_config: str, tmp_path: Path) -> Any:
    """Evaluate ``local.<name>`` of main.tf with ``terraform console`` over ``zen_config`` (YAML text,
    read as main.tf reads the Zen configuration). Needs the terraform binary."""
    block = main_local(name)
    (tmp_path / "zen.yaml").write_text(zen_config)
    (tmp_path / "main.tf").write_text(textwrap.dedent("""
        locals {
          zen_config = yamldecode(file("${path.module}/zen.yaml"))
        %s
        }
        """) % block)
    result = console(tmp_path, f"jsonencode(local.{name})")
    assert result.returncode == 0, result.stderr
    return json.loads(json.loads(result.stdout.strip().splitlines()[-1]))
