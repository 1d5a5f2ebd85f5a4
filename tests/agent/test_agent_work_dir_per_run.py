"""The agent tests' settings (tests/agent/test_agent_loop.py SETTINGS, test_slots.py, test_limits.py, ...) take
AgentSettings' default work_dir, ``$TMPDIR/zen-agent`` (zen/agent/settings.py): one directory for every run of
the suite on the machine, its xdist workers and every earlier run (each test process has a temporary folder of its own now:
tests/conftest.py). Each test agent is VM "vm-test" and replays,
as it starts, the final reports kept in ``<work_dir>/.reports/vm-test`` (zen.agent.journal: a report is kept
before its publish and removed after). A run interrupted while a final report was kept (Ctrl-C, a CI job's
timeout, an OOM kill) leaves one there, and for 24 h (journal.MAX_AGE_S) the next runs' agents publish it
first: test_an_unanswered_claim_is_resent_with_the_next_seq_kept_leased_then_given_back then failed with
    At index 0 diff: ('job-of-another-run', 1, 'SUCCEEDED') != ('j1', 1, 'CLAIMED')

Here both runs get a TMPDIR of this test's own (so nothing of the machine's /tmp is touched)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LEAVE_A_KEPT_REPORT = """
import os, time
from tests.messages import heartbeat
from zen.agent.journal import Journal
from zen.agent.settings import AgentSettings
from zen.core.models import Heartbeat

report = Heartbeat.model_validate(heartbeat("job-of-another-run", "SUCCEEDED", int(time.time() * 1000),
                                            vm="vm-test", exit_code=0))
kept = Journal(AgentSettings().work_dir, "vm-test").keep(report)  # kept before its publish ...
os._exit(0)  # ... and the run ends there (interrupted)
"""


def test_an_interrupted_runs_kept_report_does_not_reach_the_next_runs_agent_tests(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", LEAVE_A_KEPT_REPORT], env=env, cwd=ROOT, check=True, timeout=60)
    assert list((tmp_path / "zen-agent" / ".reports" / "vm-test").glob("*.json"))  # what the interrupted run left

    later = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                            str(tmp_path / "bt"), "tests/agent/test_agent_loop.py::"
                            "test_an_unanswered_claim_is_resent_with_the_next_seq_kept_leased_then_given_back"],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert later.returncode == 0, later.stdout[-3000:]
