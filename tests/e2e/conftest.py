"""The end-to-end tests' shared fixture: a short-named home for a local stack."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def home():
    """A fresh directory for one stack; its Postgres stopped and the directory removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ze2e", dir="/tmp"))  # short: unix socket paths are limited
    yield path
    from zen_dev.embedded import stop_embedded_server

    stop_embedded_server(path)  # already stopped with the stack, unless a test failed before that
    shutil.rmtree(path, ignore_errors=True)
