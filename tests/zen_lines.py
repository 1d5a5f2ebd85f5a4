"""Zen's log lines as a test sees them: ``zen_lines()`` yields the stream the ``zen`` logger writes its JSON
lines to (INFO and up) for the length of a ``with``."""

from __future__ import annotations

import io
import logging
from contextlib import contextmanager
from typing import Iterator

from zen.logs import JsonFormatter


@contextmanager
def zen_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("zen")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
