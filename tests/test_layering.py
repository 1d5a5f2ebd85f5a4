"""The core and the services import no cloud SDK and no database driver: only adapters do (STYLE.md).

Pure core: models, lifecycle, configuration, the planner. Services (the job service, the outbox,
the rows, the scaling managers) see the database and the MIGs through their interfaces
(``zen.store.db`` and ``zen.scaling.port`` types); the adapters (``zen.store.db``,
``zen.adapters.compute``, ``zen.adapters.pubsub``) are wired in by ``zen.app``."""

from __future__ import annotations

import subprocess
from pathlib import Path
import sys

import pytest

PURE = ["zen.core.models", "zen.core.lifecycle", "zen.core.config", "zen.core.clock", "zen.scaling.model", "zen.scaling.planner"]
SERVICES = ["zen.jobs.service", "zen.jobs.messaging", "zen.store.repository", "zen.scaling.port", "zen.scaling.fleetdb",
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
    root = Path(__file__).resolve().parent.parent
    long = {str(path.relative_to(root)): count
            for path in sorted((root / "shared" / "zen").rglob("*.py")) + [root / "functions" / "main.py"]
            if (count := len(path.read_text().splitlines())) > 400}
    assert long == {}
