"""A stage (inputs, checkpoint restore) longer than max_runtime_s ends the attempt FAILED "staging exceeded
max_runtime_s" (zen.agent.prestart.Prestart.prepare), its report saying ``over_limit`` so that Zen knows the agent
stopped it at its limit: as its queue takes it back at that moment, it is FAILED as a job killed at max_runtime_s
while running is (docs/explanations/delivery-guarantees.md; tests/test_queues_preemption.py), not rerun (PENDING,
attempt 2: its report said no limit)."""
from __future__ import annotations

import sys

from tests.agent.test_agent_loop import start_message
from tests.agent.test_staging import client, run_one  # noqa: F401 (fixture)
from tests.agent.test_transfer_limits import WORDS, slow_fetch
from zen.agent.staging import AttemptData
from tests.agent.conftest import storage  # noqa: F401 (fixture)


def test_the_agents_staging_timeout_report_names_its_limit(client, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(AttemptData, "_fetch", slow_fetch(3.0))
    reports = run_one(tmp_path, start_message("slow-in", max_runtime_s=1, inputs=WORDS,
                                              command=[sys.executable, "-c", "print(1)"]))
    final = reports[-1]
    assert final.status.value == "FAILED" and final.message.startswith("zen: staging exceeded max_runtime_s=1")
    assert final.over_limit == "max_runtime_s", f"over_limit={final.over_limit!r}"
