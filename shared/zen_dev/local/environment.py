"""Point this process at local stand-ins for a while: environment variables set, then restored.

The official clients find the stand-ins through the environment (``PUBSUB_EMULATOR_HOST``,
``ZEN_COMPUTE_ENDPOINT``, ...); whatever sets them in-process must put them back, or later code
talks to a stand-in that is gone.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping


@contextlib.contextmanager
def overridden_environ(values: Mapping[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
