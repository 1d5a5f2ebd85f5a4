"""The gang idle bound (``benchmarks.gang_bound``): its Monte Carlo answers what order statistics say."""

from __future__ import annotations

from benchmarks.bound import Physics
from benchmarks.gang_bound import BILLED_MIN_S, GANGS_MIX, ask_every_region, booted_for, report

P = Physics(boot_sigma=0.3)


def test_boots_that_all_take_the_same_time_leave_no_node_waiting():
    same = Physics(boot_sigma=0.0)
    assert booted_for(same, 4, 2, 200, 1).idle_s == 0.0 and ask_every_region(same, 4, 200, 1).idle_s == 0.0


def test_a_one_node_job_never_waits_for_another_node():
    assert booted_for(P, 1, 3, 2000, 1).idle_s == 0.0 and ask_every_region(P, 1, 2000, 1).idle_s == 0.0


def test_more_spares_wait_less_and_bill_more():
    runs = [booted_for(P, 4, k, 4000, 3) for k in range(4)]
    assert all(a.idle_s > b.idle_s for a, b in zip(runs, runs[1:]))
    assert runs[0].lost_s == 0.0 and all(a.lost_s < b.lost_s for a, b in zip(runs, runs[1:]))
    assert runs[1].lost_s >= BILLED_MIN_S * 0.9  # a spare that reached RUNNING is billed a minute at least


def test_the_two_node_gangs_wait_is_the_spread_of_two_boots():
    # Two lognormal boots (median 90 s, sigma 0.3): E|b1 - b2| = 2 * 90 * e^(0.045) * (2 Phi(0.3 / sqrt 2) - 1)
    # = 31.6 s; the first waits for the second.
    assert abs(booted_for(P, 2, 0, 40_000, 5).idle_s - 31.6) < 1.0


def test_the_report_says_from_how_many_spares_the_idle_target_holds():
    lines = report(GANGS_MIX, 3.0, P, samples=4000, seed=11)
    assert any(line.strip().startswith("0 ") for line in lines)
    assert "idle <= 0.25x with VMs booted for the gang: from " in lines[-1]
