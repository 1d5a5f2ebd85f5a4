"""YAML and JSON documents read strictly: a key given twice in one mapping is refused, not resolved.

PyYAML and ``json`` keep the last of two equal keys without a word, so a configuration with two
``a2-highgpu-8g:`` blocks under ``pricing.overrides`` loaded one of them, and a job file with two
``provisioning:`` lines published the second: half of what was written applied, nothing said. Zen reads
the configuration, job files and message payloads through these, so such a document is refused naming
the key (and, for YAML, its line and where it sits)."""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

import yaml

from zen.core.text import escape_unstorable

_MERGE = "tag:yaml.org,2002:merge"  # ``<<: *anchor``: keys written beside a merge override it, by design


class DuplicateKey(ValueError):
    """A mapping names one key twice; ``str()`` says which (and where, for YAML)."""


def format_loc(loc: Sequence[Any]) -> str:
    """``("capacity", "schedule", 0, "capacity")`` -> ``capacity.schedule[0].capacity``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def duplicate_keys(node: yaml.Node | None, path: tuple[Any, ...] = (), walked: set[int] | None = None
                   ) -> list[tuple[int, str]]:
    """Every key given twice in a composed YAML document: (1-based line of the second, its dotted path). Keys
    are compared as written (``1`` and ``'1'`` are one key to a model that reads either as the number); a node
    an alias repeats is walked once (an alias of itself, or aliases nested deep, would not end)."""
    walked = set() if walked is None else walked
    if id(node) in walked:
        return []
    walked.add(id(node))
    found: list[tuple[int, str]] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
            if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE:
                if name in seen:
                    found.append((key.start_mark.line + 1, format_loc(path + (name,))))
                seen.add(name)
            found += duplicate_keys(value, path + (name,), walked)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += duplicate_keys(item, path + (i,), walked)
    return found


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's booleans: ``true`` and ``false`` alone. YAML 1.1's ``on``, ``off``,
    ``yes`` and ``no`` are strings, so a notification target's documented ``on: [FAILED]`` key is read as
    written (it was the boolean True: "notify.0.1: Keys should be strings"); a boolean field still takes
    them (pydantic reads "yes" and "on" as true).

    Nor are YAML 1.1's sexagesimal and leading-zero octal numbers numbers: ``1:30`` and ``010`` are strings
    (they were 90 and 8, which YAML 1.2 does not read either), so ``max_runtime_s: 1:30`` (an hour and a half
    to its user) is refused as not a number instead of stopping the job after 90 seconds, ``priority: 010``
    is refused instead of ranking the job 8, and ``SEED: 010`` in ``env`` reaches the job as written."""


_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_Loader.yaml_implicit_resolvers = {first: [(tag, rule) for tag, rule in rules if tag not in (_BOOL, _INT, _FLOAT)]
                                   for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(  # PyYAML's, without ``[-+]?0[0-7_]+`` (octal) and ``[1-9][0-9_]*(:[0-5]?[0-9])+``
    _INT, re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"), list("-+0123456789"))
_Loader.add_implicit_resolver(  # PyYAML's, without ``[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*`` (sexagesimal)
    _FLOAT, re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))

# The same loader on libyaml's parser (PyYAML's wheels carry it), which reads a document some 13x faster
# (Zen's own configuration: 13 ms -> 1 ms; every function instance, CLI command and agent reads one). Its
# errors name the place without the line's excerpt, so text it refuses is read again by ``_Loader`` for
# the error a person sees.
_FastLoader: type | None = None
if getattr(yaml, "__with_libyaml__", False):
    class _CLoader(yaml.CSafeLoader):
        yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers

    _FastLoader = _CLoader


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` (with YAML 1.2's booleans, and ``1:30`` and ``010`` as strings: ``_Loader``) that raises
    :class:`DuplicateKey` (a ``ValueError``) for a key given twice; ``yaml.YAMLError`` as before for text that is
    not YAML."""
    if _FastLoader is not None:
        try:
            return _load(_FastLoader(text))
        except yaml.YAMLError:
            pass  # read again below, for PyYAML's own words (with the line's excerpt)
    return _load(_Loader(text))


def _load(loader: Any) -> Any:
    try:
        node = loader.get_single_node()
        twice = duplicate_keys(node)
        if twice:
            raise DuplicateKey("; ".join(f"line {line}: {where} is given twice (keep one)" for line, where in twice))
        return None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(f"key {escape_unstorable(key, 100)!r} is given twice in one object (keep one)")
        out[key] = value
    return out


def load_json(text: str | bytes) -> Any:
    """``json.loads`` that raises :class:`DuplicateKey` (a ``ValueError``) for a key given twice in an object."""
    return json.loads(text, object_pairs_hook=_pairs)
