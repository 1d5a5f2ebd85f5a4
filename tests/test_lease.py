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
    try:  # a stop_timeout_s past the grace and the final report (tests/test_stop_timeout_covers_grace.py)
        Deadlines(heartbeat_timeout_s=timeout, stop_grace_s=grace, agent_heartbeat_s=heartbeat,
                  stop_timeout_s=grace + lease.STOP_REPORT_S + 1)
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


@settings(max_examples=500, deadline=None)
@given(timeout=seconds, grace=st.floats(min_value=0, max_value=600), heartbeat=seconds, stop=seconds)
def test_a_job_its_queue_took_back_is_rerun_only_after_a_vm_cut_off_from_zen_has_ended_it(timeout, grace, heartbeat,
                                                                                           stop):
    """A preempted STOPPING job went back to PENDING stop_timeout_s after its STOP, whatever the fence: with a
    stop_timeout_s under it (10 s against a 95 s fence), a VM cut off from Zen ran the job on while the rerun
    could start elsewhere."""
    from datetime import datetime, timedelta, timezone

    from zen.core import silence
    from zen.core.models import Job, JobStatus

    try:
        deadlines = Deadlines(heartbeat_timeout_s=timeout, stop_grace_s=grace, agent_heartbeat_s=heartbeat,
                              stop_timeout_s=stop)
    except ValueError:
        return
    killed_by = lease.fence_s(timeout, grace, heartbeat) + grace  # counted from the last report Zen heard
    assert deadlines.preempted_stop_s >= max(stop, killed_by)
    stopped = datetime(2026, 12, 1, tzinfo=timezone.utc)
    job = Job(job_id="low", status=JobStatus.STOPPING, attempt=1, max_attempts=3, cluster="c", user_id="u", priority=0,
              regions=["r"], request={}, request_hash="h", max_runtime_s=60, vm="vm-a", region="r", zone="r-a",
              last_seq=2, last_heartbeat_at=stopped, submitted_at=stopped, queued_at=stopped, started_at=stopped,
              finished_at=None, exit_code=None, message=None, updated_at=stopped, preempted_by="job urgent")
    assert silence.decide_silence(job, stopped + timedelta(seconds=killed_by - 1e-3), deadlines) is None
    later = silence.decide_silence(job, stopped + timedelta(seconds=deadlines.preempted_stop_s + 1), deadlines)
    assert later is not None and later.changes[-1].to is JobStatus.PENDING
