"""Text that can always be stored (Postgres ``text``) and published (UTF-8 JSON).

Two things in a Python ``str`` cannot: NUL (Postgres refuses it) and a lone UTF-16 surrogate such
as ``"\\ud800"`` (``json.loads`` accepts it, UTF-8 cannot encode it). Reasons and ids that quote a
message's own content go through ``escape_unstorable`` before they are stored or published.
"""

from __future__ import annotations

import json
import re
from typing import Any

_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def unstorable_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None."""
    match = _UNSTORABLE.search(text)
    if match is None:
        return None
    if match.group() == "\x00":
        return "contains a NUL character"
    return "contains a lone UTF-16 surrogate (not valid Unicode)"


def escape_unstorable(text: str, limit: int | None = None) -> str:
    """``text`` with NUL and lone surrogates written as escapes (``\\x00``, ``\\ud800``), cut to
    ``limit`` characters (marked with ``...``)."""
    escaped = _UNSTORABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    if limit is not None and len(escaped) > limit:
        escaped = escaped[: limit - 3] + "..."
    return escaped


def unstorable_place(data: Any) -> str | None:
    """Where a parsed message holds text that cannot be stored, or None: one pass in C over the message
    serialised first, and the walk that names the place only when that pass found something."""
    try:
        text = json.dumps(data, ensure_ascii=False, default=str)  # NUL comes out as \u0000
        if "\\u0000" not in text and not unstorable_problem(text):
            return None
    except (TypeError, ValueError, RecursionError):
        pass  # not JSON-shaped (validation will say so) or too deep: walk
    return find_unstorable(data)


def find_unstorable(value: Any, path: str = "", depth: int = 0) -> str | None:
    """Where ``value`` holds text that cannot be stored: ``"env.B\\x00: contains a NUL character"``."""
    if isinstance(value, str):
        problem = unstorable_problem(value)
        return f"{path or '(message)'} {problem}" if problem else None
    if depth > 64:
        return None  # beyond this, validation refuses the shape anyway
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{escape_unstorable(str(key))}".lstrip(".")
            problem = unstorable_problem(key) if isinstance(key, str) else None
            if problem:
                return f"key {where} {problem}"
            found = find_unstorable(item, where, depth + 1)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = find_unstorable(item, f"{path}.{index}".lstrip("."), depth + 1)
            if found:
                return found
    return None


def human_bytes(count: float) -> str:
    """``11 B``, ``1.2 kB``, ``3.4 GB`` (powers of 1,000, as Cloud Storage's console counts)."""
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:g} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return str(count)


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An error's first line of words, at most ``limit`` characters, or its kind when it has none: what a message
    quotes of a library's error (its later lines a traceback or a response body)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__
