"""A hedge's ADD names the price it was asked at, and what it was compared with (``hedge_price_ratio`` x the first
choice's), as every ADD's reason does (docs/explanations/scaling.md, `zen explain`): it said only "1 hedge(s): the
first choice's delivery is uncertain", a VM asked in a pool without its price."""

from __future__ import annotations

from zen.scaling.model import RegionMemory, Timing

from tests.scaling.test_prices_in_planner import LIMITS, plan, queued


def test_a_hedges_add_reason_names_the_prices_compared():
    memory = {r: RegionMemory() for r in LIMITS.regions}  # nothing delivered yet: the first choice is uncertain
    result = plan(jobs=queued(1), memory=memory, timing=Timing())
    hedges = [d for d in result.decisions if d.action.value == "ADD" and "hedge" in d.reason]
    assert hedges, [d.reason for d in result.decisions]
    for decision in hedges:
        assert "$" in decision.reason and "hedge_price_ratio" in decision.reason, (
            f"ADD in {decision.region} names no price: {decision.reason!r} "
            f"(the hedge's pool costs ${LIMITS.pools[decision.region].usd_per_hour}/h; the first choice us-west1 $2.04/h)")
