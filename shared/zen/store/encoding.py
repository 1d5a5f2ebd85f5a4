"""Values as Zen writes them into jsonb columns: compact, keys sorted (stable for hashing and diffs)."""

from __future__ import annotations

import json
from typing import Any


def to_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
