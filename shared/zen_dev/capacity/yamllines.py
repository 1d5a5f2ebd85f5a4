"""Line numbers for YAML documents, and readable validation messages that point at them.

:class:`LineMap` is built from PyYAML's node tree (``yaml.compose``) and maps a location such as
``("capacity", "schedule", 0, "capacity")`` (pydantic's ``loc``) to the 1-based line where that
value is written. Elements of a location that are not in the document (pydantic's union tags, or
a missing key) are skipped, so a missing field points at its parent.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import yaml

from zen.core.documents import duplicate_keys, format_loc as format_loc  # a location, dotted

Loc = Sequence[Any]


class ScenarioError(ValueError):
    """A scenario cannot be used. ``str()`` is ``FILE line N: reason`` (more problems follow,
    one per line); ``line`` is the first problem's line (None when unknown)."""

    def __init__(self, source: str, problems: Sequence[tuple[int | None, str]]):
        self.source = source
        self.problems = list(problems)
        self.line = self.problems[0][0] if self.problems else None
        super().__init__("\n".join(_where(source, line) + reason for line, reason in self.problems))


def _where(source: str, line: int | None) -> str:
    return f"{source} line {line}: " if line is not None else f"{source}: "


class LineMap:
    """Where each value of a YAML document is written."""

    def __init__(self, root: yaml.Node | None):
        self.root = root
        self.duplicates = [(line, f"{where} is given twice") for line, where in duplicate_keys(root)]

    @classmethod
    def from_text(cls, text: str) -> "LineMap":
        return cls(yaml.compose(text, Loader=yaml.SafeLoader))

    def line(self, loc: Loc) -> int | None:
        node = self.root
        if node is None:
            return None
        line = node.start_mark.line + 1
        for part in loc:
            found = _child(node, part)
            if found is None:
                continue
            node, line = found
        return line

    def clean_loc(self, loc: Loc) -> tuple:
        """``loc`` without the parts that are not in the document (pydantic's union tags); the
        last part is always kept, as it names a missing or unknown field."""
        node, kept = self.root, []
        for i, part in enumerate(loc):
            found = _child(node, part) if node is not None else None
            if found is not None:
                node = found[0]
                kept.append(part)
            elif i == len(loc) - 1:
                kept.append(part)
        return tuple(kept)


def _child(node: yaml.Node, part: Any) -> tuple[yaml.Node, int] | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if str(key.value) == str(part):
                return value, key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        if 0 <= part < len(node.value):
            item = node.value[part]
            return item, item.start_mark.line + 1
    return None


BOOLEAN = " (YAML reads yes, no, on, off, true and false as booleans)"
_OPS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


def describe_error(err: dict, loc: Loc) -> str:
    """One pydantic error as a sentence naming the field, e.g. ``capacity must be >= 0``."""
    names = [p for p in loc if isinstance(p, str)]
    name = names[-1] if names else "value"
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    where = format_loc(loc)
    suffix = f" (at {where})" if where and where != name else ""
    if kind in _OPS and isinstance(err.get("input"), bool):  # pydantic read yes as 1, then found it out of bounds
        return f"{where or name}: a number, not {err['input']!r}{BOOLEAN}"
    if kind in _OPS:
        op, key = _OPS[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"{name} must be {op} {bound}{suffix}"
    if kind == "missing":
        return f"{name} is required{suffix}"
    if kind == "extra_forbidden":
        return f"unknown field '{name}'{suffix}"
    msg = str(err.get("msg", "invalid value"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if not loc:  # a check across fields (a model's validator): its message names them
        return msg
    if msg.startswith(f"{name}: "):  # a field's validator that names the field itself
        msg = msg[len(name) + 2 :]
    return f"{where or name}: {msg}"


def problems_from_validation(errors: Iterable[dict], lines: LineMap) -> list[tuple[int | None, str]]:
    """pydantic ``ValidationError.errors()`` -> ``[(line, sentence), ...]`` ordered by line."""
    out = []
    for err in errors:
        loc = tuple(err.get("loc", ()))
        sentence = describe_error(err, lines.clean_loc(loc))
        if not loc:  # a check across fields: the line of the field its message starts with, if any
            head = sentence.split(": ", 1)[0]
            loc = tuple(int(part) if part.isascii() and part.isdigit() else part for part in head.split(".")) if (
                ": " in sentence and " " not in head) else ()  # clusters.1: the list's second item
        out.append((lines.line(loc) if loc else None, sentence))
    return sorted(out, key=lambda p: (p[0] is None, p[0] or 0))
