"""Why Linux would not start a job (``execve`` refused its arguments and environment: E2BIG), in the job's own
terms: which of its environment variables is over Linux's limit for one string (128 KiB, ``NAME=VALUE``), or how
large its command, env and secrets are against what the VM starts a program with in all (``ARG_MAX``, a quarter of
the stack's limit, at most 6 MiB). Names and sizes only, never a value (a secret's). Its secrets alone always fit:
at most ``zen.core.secrets.MAX_SECRETS`` of Secret Manager's 64 KiB at most.
Why: docs/reference/agent.md#a-jobs-container
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

MAX_ARG_STRLEN = 32 * 4096  # Linux: one argument or NAME=VALUE, its NUL included
KERNEL_CAP = 6 * 1024 * 1024  # Linux: 3/4 of an 8 MiB stack, whatever the stack's own limit
POINTER = 8  # each string's pointer counts too


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape")) + 1


def _kib(size: int) -> str:
    return f"{-(-size // 1024)} KiB"


def too_large(argv: Sequence[str], env: Mapping[str, str], *, command: Sequence[str] | None,
              job_env: Mapping[str, str], secrets: Mapping[str, str]) -> str:
    """What to tell the job's owner when starting ``argv`` with ``env`` (the launcher's: the job's and the agent's
    own) failed with E2BIG; ``command``, ``job_env`` and ``secrets``: the job's own (``JobSpec``)."""
    over = [f"env {name}" for name, value in job_env.items() if _size(f"{name}={value}") > MAX_ARG_STRLEN]
    over += [f"secret {name}" for name, value in secrets.items() if _size(f"{name}={value}") > MAX_ARG_STRLEN]
    over += [f"command argument {index + 1}" for index, arg in enumerate(command or []) if _size(arg) > MAX_ARG_STRLEN]
    if over:
        return (f"cannot start the job: Linux takes at most {_kib(MAX_ARG_STRLEN)} for one argument or environment "
                f"variable (NAME=VALUE), and its {', '.join(over)} is larger")
    total = sum(_size(text) + POINTER for text in (*argv, *(f"{name}={value}" for name, value in env.items())))
    limit = min(os.sysconf("SC_ARG_MAX"), KERNEL_CAP)
    given = sum(_size(arg) - 1 for arg in command or [])  # what the job gave: bytes of its arguments, of values
    own = sum(_size(value) - 1 for value in job_env.values())
    hidden = sum(_size(value) - 1 for value in secrets.values())
    return (f"cannot start the job: too large for Linux to start: its command ({_kib(given)}), env ({_kib(own)}) "
            f"and {len(secrets)} secrets ({_kib(hidden)}) make {_kib(total)} of arguments and environment "
            f"with what Zen adds, and this VM starts a program with at most {_kib(limit)}")
