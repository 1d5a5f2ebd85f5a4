"""A user's stop gives its job ``stop_grace_s`` from SIGTERM to SIGKILL, and the agent ``STOP_REPORT_S`` after it for
the rest of the output and the final report; Zen ends the job CANCELLED ("no answer from" its VM) ``stop_timeout_s``
after the stop. A configuration with ``stop_timeout_s: 10`` and the default 10 s grace was accepted: every stopped job
was CANCELLED while still in its grace, and the STOP's ``answer_within_s`` (10) cut its SIGTERM checkpoint save and
output upload 5 s after the stop. Such a configuration is refused, naming both fields and what to change."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from zen.agent.reports import AttemptReport
from zen.agent.settings import AgentSettings, with_deadlines
from zen.core import silence
from zen.core.config import load_config
from zen.core.errors import ConfigError
from zen.core.lease import STOP_REPORT_S, Deadlines
from zen.core.models import Job, JobStatus

STOPPED = datetime(2026, 12, 1, tzinfo=timezone.utc)


def _stopping() -> Job:
    return Job(job_id="j", status=JobStatus.STOPPING, attempt=1, max_attempts=3, cluster="c", user_id="u", priority=0,
               regions=["r"], request={}, request_hash="h", max_runtime_s=60, vm="vm-a", region="r", zone="r-a",
               last_seq=2, last_heartbeat_at=STOPPED, submitted_at=STOPPED, queued_at=STOPPED, started_at=STOPPED,
               finished_at=None, exit_code=None, message=None, updated_at=STOPPED, stop_reason="stopped by u")


@pytest.mark.parametrize("stop_timeout_s, stop_grace_s", [(10, 10), (15, 10), (8, 0.5), (120, 10), (30, 2)])
def test_every_accepted_stop_timeout_waits_out_the_grace_and_the_final_report(stop_timeout_s, stop_grace_s):
    try:
        deadlines = Deadlines(stop_timeout_s=stop_timeout_s, stop_grace_s=stop_grace_s)
    except ValueError:
        assert stop_grace_s + STOP_REPORT_S >= stop_timeout_s
        return
    job = _stopping()
    # The STOP Zen sends at the stop carries answer_within_s; the agent cuts the upload STOP_REPORT_S before it.
    within = silence.stop_left_s(job, STOPPED, deadlines)
    assert within is not None
    report = AttemptReport(job_id="j", attempt=1)
    report.stopped(0.0, within, False, None)
    assert report.report_by >= stop_grace_s, "the STOP cut the job's upload before its SIGTERM grace was over"
    # Zen still waits for the agent's answer once the grace and the final report's time are over.
    answered_by = STOPPED + timedelta(seconds=stop_grace_s + STOP_REPORT_S - 1e-3)
    assert silence.decide_silence(job, answered_by, deadlines) is None, "CANCELLED while the job was in its grace"


def test_a_stop_timeout_within_the_grace_is_refused_naming_both_fields(tmp_path):
    with pytest.raises(ValueError) as refused:
        Deadlines(stop_timeout_s=10)  # the default grace, 10 s
    text = str(refused.value)
    assert "stop_timeout_s=10" in text and "stop_grace_s=10" in text
    assert "raise stop_timeout_s above 15" in text and "shorten stop_grace_s below 5" in text
    path = tmp_path / "zen.yaml"
    cluster = "clusters:\n  - {name: a, gpu_type: t, gpu_count: 4, regions: [r], max_vms_per_region: 1, max_vms: 1}\n"
    path.write_text(cluster + "deadlines:\n  stop_timeout_s: 20\n  stop_grace_s: 15\n")
    with pytest.raises(ConfigError, match=r"deadlines: .*stop_timeout_s=20 .*stop_grace_s=15.*above 20 .*below 15"):
        load_config(path)
    path.write_text(cluster + "deadlines:\n  stop_timeout_s: 21\n  stop_grace_s: 15\n")
    assert load_config(path).deadlines.stop_timeout_s == 21


def test_an_agent_whose_own_grace_outlasts_the_stop_timeout_does_not_start():
    """A VM's ZEN_AGENT_STOP_GRACE_S overrides the configuration's grace: it is held to the same rule."""
    deadlines = Deadlines(stop_timeout_s=20, stop_grace_s=2)
    assert with_deadlines(AgentSettings(stop_grace_s=14), deadlines, {"ZEN_AGENT_STOP_GRACE_S": "14"}).stop_grace_s == 14
    with pytest.raises(ConfigError, match=r"stop_timeout_s=20 .*stop_grace_s=15"):
        with_deadlines(AgentSettings(stop_grace_s=15), deadlines, {"ZEN_AGENT_STOP_GRACE_S": "15"})
