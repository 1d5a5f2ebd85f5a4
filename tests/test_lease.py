"""The lease arithmetic (``zen.core.lease``, ``zen.agent.fence``): for every set of periods the configuration
accepts, an attempt cut off from Zen, or whose agent cannot run, is SIGKILLed at least the margin before
Zen may take it for lost; and every set it refuses is one where that would not hold."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings, strategies as st

from zen.core import lease
from zen.core.lease import Deadlines

seconds = st.floats(min_value=0.1, max_value=3600, allow_nan=False, allow_infinity=False)


@settings(max_examples=2000, deadline=None)
@given(timeout=seconds, grace=st.floats(min_value=0, max_value=600), heartbeat=seconds)
@example(timeout=120, grace=10, heartbeat=31.7)  # the floor decides by 0.1 s: once accepted, the margin not kept
def test_accepted_periods_end_the_job_before_zens_deadline(timeout, grace, heartbeat):
    try:
        Deadlines(heartbeat_timeout_s=timeout, stop_grace_s=grace, agent_heartbeat_s=heartbeat)
    except ValueError:
        assert lease.too_tight(timeout, grace, heartbeat)
        return
    # SIGTERM at the fence, SIGKILL a grace later, both counted from before the last report Zen heard.
    killed_by = lease.fence_s(timeout, grace, heartbeat) + grace
    assert killed_by <= timeout - min(lease.MARGIN_S, timeout / 4) + 1e-9
    assert lease.fence_s(timeout, grace, heartbeat) >= lease.MIN_BEATS * heartbeat  # no stop on one lost beat


@pytest.mark.parametrize("timeout, grace, heartbeat, fence", [
    (120, 10, 30, 95), (20, 2, 2, 13), (8, 1, 1, 5), (3, 0.5, 0.5, 1.75)])
def test_the_figures_the_documentation_gives(timeout, grace, heartbeat, fence):
    assert lease.fence_s(timeout, grace, heartbeat) == fence
    assert not lease.too_tight(timeout, grace, heartbeat)


def test_the_vm_silence_follows_the_vm_heartbeat_and_never_undercuts_the_jobs_deadline():
    assert Deadlines().agent_silence_s == 180
    assert Deadlines(vm_heartbeat_s=10, heartbeat_timeout_s=60, agent_heartbeat_s=10).agent_silence_s == 60
