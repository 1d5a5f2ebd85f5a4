"""A small evaluator for the subset of the Cloud Logging query language and extractor syntax that
terraform/monitoring.tf uses, so tests can run each log-based metric against real log lines.

Supported: terms joined by ``AND`` (anything else, e.g. ``OR`` or parentheses, raises, so a filter
outside the subset fails loudly instead of matching by accident); ``path = "text"``, ``!=``,
``=~ "regex"`` (search), ``:`` (substring, or presence with no value), ``>=``/``>``/``<=``/``<`` on
numbers and on ``severity``; extractors ``EXTRACT(path)`` and ``REGEXP_EXTRACT(path, "regex")``.

An entry is a dict shaped like a LogEntry: ``severity``, ``logName``, ``resource`` and ``jsonPayload``. A JSON
line as Zen writes it becomes one with ``entry_from_line``, as Cloud Logging does it for Cloud Run.
"""

from __future__ import annotations

import json
import re
from typing import Any

SEVERITIES = ["DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY"]
_TERM = re.compile(r'^\s*([A-Za-z_][\w.]*)\s*(=~|!=|>=|<=|=|>|<|:)\s*("(?:[^"\\]|\\.)*"|[^\s"]+)?\s*$')
_EXTRACT = re.compile(r'^\s*EXTRACT\(\s*([\w.]+)\s*\)\s*$')
_REGEXP_EXTRACT = re.compile(r'^\s*REGEXP_EXTRACT\(\s*([\w.]+)\s*,\s*("(?:[^"\\]|\\.)*")\s*\)\s*$')
MISSING = object()


class Unsupported(ValueError):
    """The filter or extractor uses syntax this evaluator does not implement."""


def entry_from_line(line: str, service: str = "zen-on-scale-tick", project: str = "p") -> dict[str, Any]:
    """What Cloud Logging stores for a JSON line a Cloud Run service writes to stderr."""
    payload = json.loads(line)
    severity = payload.pop("severity", "DEFAULT")
    return {"severity": severity, "logName": f"projects/{project}/logs/run.googleapis.com%2Fstderr",
            "resource": {"type": "cloud_run_revision", "labels": {"service_name": service}}, "jsonPayload": payload}


def resolve(entry: dict[str, Any], path: str) -> Any:
    value: Any = entry
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def _literal(token: str | None) -> Any:
    if token is None:
        return None
    if token.startswith('"'):
        return json.loads(token)
    return token


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _compare(path: str, op: str, actual: Any, expected: Any) -> bool:
    if op == ":":
        if expected is None:
            return actual is not MISSING and actual is not None
        return actual is not MISSING and str(expected).lower() in str(actual).lower()
    if actual is MISSING or actual is None:
        return op == "!="
    if op == "=~":
        return re.search(expected, str(actual)) is not None
    if op in ("=", "!="):
        equal = str(actual) == str(expected) if isinstance(actual, str) else _number(actual) == _number(expected)
        return equal if op == "=" else not equal
    if path == "severity":
        left, right = SEVERITIES.index(str(actual)), SEVERITIES.index(str(expected))
    else:
        left, right = _number(actual), _number(expected)
        if left is None or right is None:
            return False
    return {">=": left >= right, ">": left > right, "<=": left <= right, "<": left < right}[op]


def matches(query: str, entry: dict[str, Any]) -> bool:
    if re.search(r"\bOR\b|\bNOT\b|[()]", re.sub(r'"(?:[^"\\]|\\.)*"', '""', query)):
        raise Unsupported(f"only AND-joined comparisons are supported: {query}")
    for term in re.split(r"\s+AND\s+", query.strip()):
        found = _TERM.match(term)
        if not found:
            raise Unsupported(f"cannot read the term {term!r}")
        path, op, token = found.groups()
        if not _compare(path, op, resolve(entry, path), _literal(token)):
            return False
    return True


def extract(extractor: str, entry: dict[str, Any]) -> Any:
    """The extracted value, or ``MISSING`` when the field is absent or null (Logging then uses the
    label's default, or drops the value)."""
    found = _EXTRACT.match(extractor)
    if found:
        value = resolve(entry, found.group(1))
        return MISSING if value is None else value
    found = _REGEXP_EXTRACT.match(extractor)
    if found:
        value = resolve(entry, found.group(1))
        if value is MISSING or value is None:
            return MISSING
        hit = re.search(json.loads(found.group(2)), str(value))
        return hit.group(1) if hit else MISSING
    raise Unsupported(f"cannot read the extractor {extractor!r}")
