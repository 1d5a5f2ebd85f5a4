"""The light-load bound of ``make bench-bound`` (benchmarks/bound.py): its cases that are known exactly."""

from benchmarks.bound import Physics, cold_starts, least_waste


def test_booting_every_region_and_deleting_at_usable_is_ask_every_region_itself():
    ratio, mix, ask_waste = least_waste(Physics(), 6, None, 4000, 3)
    assert ratio == 1.0 and mix.startswith("3 boot(s)")
    assert ask_waste > Physics().delete_s  # its losers are billed past RUNNING


def test_deleting_losers_sooner_costs_less_and_one_boot_has_no_loser():
    p = Physics()
    at_usable, early, instant = (cold_starts(p, 3, after, 4000, 5).loser_s for after in (None, 10.0, 0.0))
    assert at_usable > early > instant >= 0
    assert cold_starts(p, 1, None, 1000, 5).loser_s == 0


def test_a_higher_arrival_rate_lets_warm_vms_pay_for_speed():
    light, busy = (least_waste(Physics(), rate, None, 4000, 7)[0] for rate in (6, 30))
    assert busy < light
