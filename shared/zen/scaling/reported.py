"""Failures reported once, kept until a pass plans with them: a flex-start resize request that failed.

Compute keeps a FAILED resize request until it is deleted, and the read that deletes it is the one that reports it
(``zen.adapters.flex_start``): no later read sees it again. The tick reads every MIG before it takes a cluster's
lock; when another pass planned the cluster in between, the tick's pass reads the MIGs again, and when another pass
holds the lock, the tick's pass is skipped. Either way the first read's states are dropped, and with them its
request failures: the pool was never struck and the job's requests were asked there again, failing the same way.
:class:`Unreported` keeps them (the pending name of the request's first VM names them, ``PENDING_SEP``) and hands
them to the manager's next pass: the same pass when it reads again, the next one when it was skipped.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Mapping

from zen.core.provisioning import PENDING_SEP
from zen.scaling.model import MigError, RegionMemory
from zen.scaling.port import MigApiError, MigState

_LATER = timedelta(microseconds=1)


def reported_once(error: MigError) -> bool:
    """Whether ``error`` is a failed flex-start request's (its instance the request's pending name), which no read
    reports again and which strikes its pool whatever its reason (``zen.scaling.probes.strikes``)."""
    return error.instance is not None and PENDING_SEP in error.instance


class Unreported:
    """Per pool, the request failures of states a pass dropped; taken by the next pass that reads the pool."""

    def __init__(self) -> None:
        self._by_pool: dict[str, list[MigError]] = {}

    def keep(self, states: Mapping[str, MigState | MigApiError] | None) -> None:
        """Keep the request failures of ``states`` (read, then dropped unplanned)."""
        for pool, state in (states or {}).items():
            if isinstance(state, MigState) and (failed := [e for e in state.errors if reported_once(e)]):
                self._by_pool.setdefault(pool, []).extend(failed)

    def take(self, pool: str, memory: Mapping[str, RegionMemory]) -> list[MigError]:
        """``pool``'s kept failures, handed over once. Each is newer than what the pool's memory has seen: a pass in
        between may have seen errors read after it, and the planner takes none at or before ``seen_errors_until``."""
        failed = self._by_pool.pop(pool, [])
        seen = memory[pool].seen_errors_until if pool in memory else None
        return [replace(e, at=seen + _LATER) if seen is not None and e.at <= seen else e for e in failed]
