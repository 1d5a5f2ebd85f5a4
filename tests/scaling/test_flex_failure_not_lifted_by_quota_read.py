"""A flex-start resize request that failed strikes its pool (``zen.adapters.flex_start``: Compute does not try it
again); the strike's reason is the failure's own words (``MigError.detail``). That detail was taken for the tick's
GPU quota read's, so the block was marked as the read's, and the next pass whose fresh quota read found room lifted
it: a pool whose request failed for a stockout was asked again at once, pass after pass, its backoff gone."""

from __future__ import annotations

from dataclasses import replace as replaced

from tests.scaling.test_planner import LIMITS, at, jobs, snap
from zen.scaling import probes
from zen.scaling.model import Action, ErrorKind, MigError
from zen.scaling.planner import ZenPlanner

CENTRAL = LIMITS.regions[0]


def _failed(kind: ErrorKind) -> MigError:
    return MigError(CENTRAL, kind, at(0), f"mig-{CENTRAL}+rr-1+0",
                    detail=f"flex-start resize request rr-1 failed ({kind.value}: no capacity)")


def test_a_failed_flex_start_request_is_not_a_quota_reads_block():
    assert probes.quota_kind([_failed(ErrorKind.STOCKOUT)]) == ""
    assert probes.quota_kind([_failed(ErrorKind.QUOTA)]) == "refused"
    read = MigError(CENTRAL, ErrorKind.QUOTA, at(0), detail="the GPU quota read leaves no room")  # the tick's
    assert probes.quota_kind([read]) == "read"


def test_a_pool_struck_by_a_failed_request_stays_blocked_through_a_fresh_quota_read_with_room():
    first = ZenPlanner().plan(replaced(snap(0, queued=jobs(1, regions=(CENTRAL,)), errors=[_failed(ErrorKind.STOCKOUT)]),
                                       quota_room={}))
    assert any(d.action is Action.BLOCK and d.region == CENTRAL for d in first.decisions), first.decisions
    assert first.memory[CENTRAL].quota_block == ""
    later = ZenPlanner().plan(replaced(snap(60, queued=jobs(1, regions=(CENTRAL,)), memory=first.memory),
                                       quota_room={}))  # the next tick: a fresh read, no quota short
    assert not any(d.action is Action.UNBLOCK and d.region == CENTRAL for d in later.decisions), later.decisions
    assert later.memory[CENTRAL].blocked_until == first.memory[CENTRAL].blocked_until
