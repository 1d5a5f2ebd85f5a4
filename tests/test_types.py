"""The type checker passes (issue 32): mypy over ``shared/zen`` as pyproject.toml configures it, strict
where a port meets its adapters (zen.core, zen.scaling, the Compute adapter), on the job service
(zen.jobs) and its Postgres store (zen.store), and on the agent's loop and its parts, so that a port,
its adapter and its callers cannot drift apart unnoticed.

It runs from an empty cache each time: mypy's incremental cache has given order-dependent answers
on the ``google.cloud`` namespace package (mypy issue 10360), and a cold run takes seconds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_passes(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"mypy found errors:\n{result.stdout}{result.stderr}"
    assert "Success: no issues found" in result.stdout, result.stdout
