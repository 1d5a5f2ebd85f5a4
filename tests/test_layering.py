"""The core imports no cloud SDK and no database driver: only adapters do (STYLE.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE = ["zen.models", "zen.lifecycle", "zen.config", "zen.clock", "zen.scaling.model", "zen.scaling.planner"]


@pytest.mark.parametrize("module", PURE)
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
