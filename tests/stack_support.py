"""Local stacks in tests: a free block of ports, and the ``home`` fixture (a short-named directory for one
stack, its Postgres stopped and the directory removed afterwards). Import ``home`` into a test module to
use it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from zen_dev.local.stack import Ports, port_free


def free_base_port(start: int = 21000) -> int:
    """The first block of a stack's ports from ``start`` that is free (tests running at once pick apart)."""
    for base in range(start, max(30000, start + 2000), 20):
        if all(port_free(p) for p in Ports.from_base(base).all().values()):
            return base
    raise RuntimeError("no free block of ports")


@pytest.fixture
def home():
    """A fresh directory for one stack; its Postgres stopped and the directory removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ze2e", dir="/tmp"))  # short: unix socket paths are limited
    yield path
    from zen_dev.embedded import stop_embedded_server

    stop_embedded_server(path)  # already stopped with the stack, unless a test failed before that
    shutil.rmtree(path, ignore_errors=True)
