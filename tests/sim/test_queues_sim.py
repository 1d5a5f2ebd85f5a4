"""Queues in the simulator (zen_dev.sim.queues): the production admission core over simulated jobs."""

from __future__ import annotations

from zen_dev.sim import fairness
from zen_dev.sim.metrics import percentile


def test_a_tenants_jobs_start_within_a_cold_boot_despite_a_flood_and_no_quota_is_exceeded():
    fifo, _ = fairness.run()
    fair, violations = fairness.run(fairness._QUEUES)
    assert violations == 0
    assert percentile(fair["bob"], 95) <= fairness.BOOT_MEDIAN_S * 2.5  # a cold boot, not the flood
    assert percentile(fifo["bob"], 95) > 10 * percentile(fair["bob"], 95)  # FIFO: behind the flood


def test_queued_jobs_beyond_quota_wait_and_start_as_quota_frees():
    _, violations = fairness.run(fairness._COHORT)
    assert violations == 0
    waits, _ = fairness.run(fairness._QUEUES)
    # team-a holds 20 GPUs at most: its 21st job waits for one of its first 20 to end
    assert sorted(waits["alice"])[19] < 400 < sorted(waits["alice"])[20]
