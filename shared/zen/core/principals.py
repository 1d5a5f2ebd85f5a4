"""Who may do what: a principal (the e-mail a submitter's identity token proves, ``zen.adapters.submitters``;
with ``ZEN_AUTH=off``, the ``user_id`` a message claims) against the rules of the configuration's
``auth:`` section and of each queue (``submitters``, ``admins``, ``max_priority``). Pure: no I/O.

A rule is a list of patterns, each one of
- ``alice@example.com``: that principal (case does not matter, as in e-mail addresses);
- ``*@example.com``: every principal of that domain (users and, as ``*@<project>.iam.gserviceaccount.com``,
  a project's service accounts);
- ``group:ml-team``: the members of ``auth.groups.ml-team`` (patterns themselves, not groups);
- ``*``: every principal.
Why groups live in the configuration and not in Google Groups: checking a membership there costs a
Cloud Identity call per message, and a group a queue names must be readable by Zen's functions; the
configuration is read once per instance. Rules and their reasons: docs/how-to/queues.md#who-may-use-a-queue.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

PATTERN = re.compile(r"^(\*|\*@[A-Za-z0-9.-]+|group:[a-z0-9][a-z0-9-]{0,62}|[^\s*@]+(@[A-Za-z0-9.-]+)?)$")


def pattern_error(pattern: str, groups: Mapping[str, list[str]]) -> str | None:
    """Why ``pattern`` is no rule (None: it is one)."""
    if not PATTERN.match(pattern):
        return (f"{pattern!r} is not a principal pattern: an e-mail (alice@example.com), a domain (*@example.com), "
                "a group (group:NAME, defined under auth.groups), * (anyone) or a bare user id (alice)")
    if "@" not in pattern and pattern.endswith(".gserviceaccount.com"):  # a bare name matches only a user id as given
        return (f"{pattern!r} is a service account's e-mail without its '@' (e.g. "
                f"{pattern.split('.', 1)[0]}@{pattern.split('.', 1)[1] if '.' in pattern else '...'})")
    if pattern.startswith("group:") and pattern[6:] not in groups:
        return f"{pattern!r} names no group of auth.groups (its groups: {', '.join(sorted(groups)) or 'none'})"
    return None


def matches(principal: str, patterns: Iterable[str], groups: Mapping[str, list[str]]) -> str | None:
    """The first pattern that takes ``principal`` (None: none does); a group's members are patterns."""
    who = principal.lower()
    for pattern in patterns:
        if pattern.startswith("group:"):
            if matches(principal, [p for p in groups.get(pattern[6:], []) if not p.startswith("group:")], groups):
                return pattern
        elif pattern == "*" or (pattern.startswith("*@") and who.endswith(pattern[1:].lower())) or who == pattern.lower():
            return pattern
    return None


def is_service_account(email: str) -> bool:
    """A service account's e-mail (``...@<project>.iam.gserviceaccount.com``, a default one's
    ``...@developer.gserviceaccount.com`` or ``...@appspot.gserviceaccount.com``): it may ask Google for any
    audience, so Zen takes its token for Zen's own alone (``zen.adapters.submitters``)."""
    return email.lower().endswith(".gserviceaccount.com")
