"""The layout is the architecture (ARCHITECTURE.md, STYLE.md), checked on the source.

Every import counts, wherever it is written: at module level, in a function body, under
``if TYPE_CHECKING``. Each arrow between packages is one ``ALLOWED`` declares; no module is part of
an import circle; ``zen`` reaches the development-only ``zen_dev`` only from the ``zen`` command,
inside functions (``tests/test_usercli_wheel.py`` imports every module of the built wheel without it). The core and the services import no cloud SDK and no database
driver: only adapters do."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT / "shared"

# Which packages each package may import, besides its own modules, the root ``zen`` (its version)
# and ``zen.logs`` (the log format), which import nothing of Zen's. An entry names a package or one
# module; "zen" means anything in zen.
ALLOWED: dict[str, set[str]] = {
    "zen.core": set(),  # the pure domain: messages, lifecycle, configuration, routing
    "zen.scaling": {
        "zen.core", "zen.telemetry",
        # fleetdb is the fleet port (scaling.port.FleetFacts) over Postgres; asks only types the Database
        "zen.store",
    },
    "zen.jobs": {
        "zen.core", "zen.telemetry",  # and never zen.store: Postgres only through the port, zen.jobs.store
        # the service builds its VM-proof and submitter checkers (ProofChecker.from_env,
        # SubmitterChecker.from_env), and announce names the CONFIRM's sealed-key attribute, instead of
        # being handed them by zen.app
        "zen.adapters.vm_proof", "zen.adapters.message_key", "zen.adapters.submitters",
    },
    "zen.store": {
        "zen.core",
        "zen.jobs.store",  # the job-store port that zen.store.jobstore implements
        "zen.jobs.outgoing",  # the outgoing messages the port's outbox rows hold
    },
    "zen.adapters": {"zen.core", "zen.jobs.messaging", "zen.jobs.outgoing", "zen.scaling.model",
                     "zen.scaling.port"},  # the ports they serve, and what they carry
    "zen.agent": {"zen.core", "zen.adapters"},
    "zen.telemetry": {
        "zen.core", "zen.scaling.model",  # the types of what it logs
        "zen.store",  # log_tick reads the jobs in flight and the outbox backlog (zen.store.stats)
    },
    "zen.console": {"zen"},  # the web console reads as the CLI does (zen.console.pages)
    "zen.cli": {"zen"},  # and zen_dev, inside functions only: test_zen_imports_zen_dev_only_in_the_cli
    "zen.app": {"zen"},  # the composition root
    "zen_dev": {"zen", "zen_dev"},
}
EVERYONE = {"zen", "zen.logs"}


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    where: str  # "module", "function" or "typing" (under ``if TYPE_CHECKING``)

    def __str__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target} ({self.where})"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(SHARED.rglob("*.py")):
        parts = list(path.relative_to(SHARED).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str) -> list[Import]:
    """Every import of a zen or zen_dev module that ``module`` writes. ``from package import name``
    is an import of the submodule when ``name`` is one, else of the package."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = "function"
            elif isinstance(child, ast.If) and where == "module" and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in child.body:
                    visit(ast.Module(body=[statement], type_ignores=[]), "typing")
                for statement in child.orelse:
                    visit(ast.Module(body=[statement], type_ignores=[]), where)
                continue
            if isinstance(child, ast.Import):
                found.extend(Import(module, alias.name, child.lineno, where) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([child.module] if child.module else []))
                for alias in child.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                    found.append(Import(module, target, child.lineno, where))
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), "module")
    return [i for i in found if i.target.split(".")[0] in ("zen", "zen_dev")]


@functools.cache
def imports() -> list[Import]:
    """Every module's imports, parsed once by the worker that runs these tests (not by each worker's collection)."""
    return [i for module in MODULES for i in _imports(module)]


def _package(module: str) -> str:
    """The entry of ALLOWED a module belongs to (zen.logs, zen.telemetry, zen.app: the module itself)."""
    parts = module.split(".")
    if parts[0] == "zen_dev" or len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2])


def _within(target: str, entries: set[str]) -> bool:
    return any(target == entry or target.startswith(entry + ".") for entry in entries)


def test_the_table_names_every_package():
    packages = {_package(module) for module in MODULES} - EVERYONE
    assert packages == set(ALLOWED)


def test_every_arrow_between_packages_is_allowed():
    wrong = []
    for imported in imports():
        source = _package(imported.source)
        if imported.target.split(".")[0] == "zen_dev" and source != "zen_dev":
            continue  # test_zen_imports_zen_dev_only_in_the_cli
        if source in EVERYONE:
            allowed: set[str] = set()
        else:
            allowed = ALLOWED[source] | {source}
        if not (imported.target in EVERYONE or _within(imported.target, allowed)):
            wrong.append(str(imported))
    assert wrong == []


def test_zen_imports_zen_dev_only_in_the_cli():
    """Only the ``zen`` command, and only inside functions: ``zen local``, ``zen demo`` and ``zen simulate``
    (which say "development checkout" without it), and a running local stack's environment
    (``zen.cli.main._use_local_stack``), so the deployed wheel, without zen_dev, runs every other command."""
    reaching = [i for i in imports() if i.source.split(".")[0] == "zen" and i.target.split(".")[0] == "zen_dev"]
    assert [str(i) for i in reaching if _package(i.source) != "zen.cli" or i.where != "function"] == []
    assert reaching, "the local-only commands import zen_dev (else this test checks nothing)"


def test_no_import_circle():
    """No module imports, directly or through others, a module that imports it (Tarjan's strongly
    connected components over every import of zen and zen_dev)."""
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for imported in imports():
        if imported.target in MODULES and imported.target != imported.source:
            graph[imported.source].add(imported.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def connect(module: str) -> None:  # recursion depth: the longest import chain (tens)
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while (top := stack.pop()) != module:
                component.append(top)
            if component:
                circles.append(sorted([module, *component]))

    for module in graph:
        if module not in index:
            connect(module)
    assert circles == []


def test_the_import_reader_sees_every_kind_of_import():
    """The checks above are only as good as the reader: a lazy import, a TYPE_CHECKING one, a relative
    one and ``from package import submodule`` are all seen, each as what it is."""
    seen = {(i.source, i.target, i.where) for i in imports()}
    assert ("zen.cli.programs", "zen_dev.sim.cli", "function") in seen
    assert ("zen.scaling.asks", "zen.store.db", "typing") in seen
    assert ("zen_dev.local.pubsub.state", "zen_dev.local.pubsub.delivery", "module") in seen  # from .delivery import
    assert ("zen_dev.local.compute.server", "zen_dev.local.compute.views", "module") in seen  # from pkg import views


PURE = ["zen.core.models", "zen.core.lifecycle", "zen.core.config", "zen.core.clock", "zen.scaling.model", "zen.scaling.planner"]
SERVICES = ["zen.jobs.service", "zen.jobs.decisions", "zen.jobs.sweeps", "zen.jobs.vm_beats", "zen.jobs.store",
            "zen.jobs.messaging", "zen.store.repository", "zen.scaling.port", "zen.scaling.fleetdb",
            "zen.scaling.manager"]


@pytest.mark.parametrize("module", PURE + SERVICES)
def test_pure_modules_import_no_adapter_library(module):
    code = (
        f"import sys; import {module}; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pg8000', 'grpc', 'pgserver') "
        # bare 'google' / 'google.cloud' are namespace packages a .pth file may import at startup
        "or m.startswith(('google.cloud.', 'google.api_core', 'google.auth', 'google.pubsub')));"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"{module} pulls in {out}"


def test_no_module_is_over_400_lines():
    """Readable in one sitting (issue 12): a module that grows past 400 lines is split by concern, as
    ``zen.jobs.messaging`` (the outbox relay) and ``zen.adapters.pubsub`` (the Pub/Sub adapter) were."""
    long = {str(path.relative_to(ROOT)): count
            for path in sorted((SHARED / "zen").rglob("*.py")) + [ROOT / "functions" / "main.py"]
            if (count := len(path.read_text().splitlines())) > 400}
    assert long == {}
