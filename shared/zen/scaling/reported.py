"""Failures reported once, kept until a pass plans with them: a flex-start resize request that failed.

Compute keeps a FAILED resize request until it is deleted, and the read that deletes it is the one that reports it
(``zen.adapters.flex_start``): no later read sees it again. The tick reads every MIG before it takes a cluster's
lock; when another pass planned the cluster in between, the tick's pass reads the MIGs again, and when another pass
holds the lock, the tick's pass is skipped. Either way the first read's states are dropped, and with them its
request failures: the pool was never struck and the job's requests were asked there again, failing the same way.
:class:`Unreported` keeps them in Postgres (``FleetPort.keep_failures``; the pending name of the request's first VM
names them, ``PENDING_SEP``) for the cluster's next pass that reads their pool: the same pass when it reads again,
the next one when it was skipped, on whichever function instance it runs. That pass forgets them in the transaction
that records its memory (``FleetPort.record``'s ``planned``): one that fails before leaves them to the next.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Collection, Mapping

from zen.core.provisioning import PENDING_SEP
from zen.scaling.model import MigError
from zen.scaling.port import FleetFacts, FleetPort, MigApiError, MigState

_LATER = timedelta(microseconds=1)


def reported_once(error: MigError) -> bool:
    """Whether ``error`` is a failed flex-start request's (its instance the request's pending name), which no read
    reports again and which strikes its pool whatever its reason (``zen.scaling.probes.strikes``)."""
    return error.instance is not None and PENDING_SEP in error.instance


class Unreported:
    """One cluster's request failures of states a pass dropped, kept in Postgres until a pass plans with them."""

    def __init__(self, fleet: FleetPort, cluster: str) -> None:
        self._fleet, self._cluster = fleet, cluster

    def keep(self, states: Mapping[str, MigState | MigApiError] | None, now: datetime) -> bool:
        """Keep the request failures of ``states`` (read, then dropped unplanned); whether there were any."""
        failed = {pool: errors for pool, state in (states or {}).items()
                  if isinstance(state, MigState) and (errors := [e for e in state.errors if reported_once(e)])}
        if failed:
            self._fleet.keep_failures(self._cluster, failed, now)
        return bool(failed)

    @staticmethod
    def take(facts: FleetFacts, read: Collection[str], pools: Collection[str]) -> tuple[dict[str, list[MigError]],
                                                                                        list[int]]:
        """The kept failures of the pools ``read`` this pass, by pool, and the ids the pass forgets when it records
        (those, and those of a pool the cluster no longer has among its ``pools``). Each is newer than what the
        pool's memory has seen: a pass in between may have seen errors read after it, and the planner takes none at
        or before ``seen_errors_until``."""
        taken: dict[str, list[MigError]] = {}
        planned = []
        for id_, pool, error in facts.failures:
            if pool in read:
                seen = facts.memory[pool].seen_errors_until if pool in facts.memory else None
                taken.setdefault(pool, []).append(replace(error, at=seen + _LATER)
                                                  if seen is not None and error.at <= seen else error)
            if pool in read or pool not in pools:
                planned.append(id_)
        return taken, planned
