"""``flexrun.Queued.used``: a gang that counted a queued request larger than it needs takes ``need`` of its
pending VMs; the whole request left the queued count, though its other VMs are still queued (no VM yet), so
from then on they counted as granted: a job past its start bound that may take another pool is covered by
them (``ZenPlanner._cover``'s ``late`` subtracts ``self.queued``), the very thing ``Queued`` is for.

Through ZenPlanner.plan, as tests/scaling/test_flex_gang_past_bound.py."""

from __future__ import annotations

from tests.scaling.test_flex_gang_past_bound import FLEX, POOLS, STD, at, plan
from zen.scaling.model import DemandGroup, Vm, VmPhase


def test_a_late_job_is_not_covered_by_the_rest_of_a_queued_request_a_gang_took_part_of():
    request = tuple(Vm(f"zen-c-us-central1-flex+r1+{i}", FLEX, VmPhase.BOOTING, at(0)) for i in range(3))
    one = DemandGroup(tuple(POOLS), 1, at(0), max_wait_s=1000)  # accepts standard too: past 1000 s it is late
    # Alone, past its bound, the late job is asked a standard VM (the queued request of 3 covers it not).
    assert plan(1100, (one,), request).add.get(STD, 0) >= 1
    # A flex-only gang of 2, queued earlier, counts that request of 3 as its own (it holds all it lacks).
    gang = DemandGroup((FLEX,), 2, at(-10), max_wait_s=3600, gang=2)
    got = plan(1100, (gang, one), request)
    assert got.add.get(STD, 0) >= 1, (
        f"the late job is covered by the 3rd VM of a request still queued (asked {got.add}): Queued.used dropped "
        "the whole request of 3 from the queued count when the gang took 2 of its VMs")
