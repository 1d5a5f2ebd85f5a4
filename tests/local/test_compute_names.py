"""The Compute stand-in names a MIG's VMs from the scenario's seed and a salt it draws when started as a
program (``zen local up``): a restarted stack's VMs were named as the last one's were, so a job's
history read "no heartbeat from zen-1xl4-us-east4-krfj" and then "claimed by zen-1xl4-us-east4-krfj",
another VM. In-process stand-ins keep the seed's names (tests and the simulator replay them)."""

from __future__ import annotations

from zen.adapters.compute import MigManager, compute_clients_from_env
from zen_dev.local.compute import ComputeStandIn, ManualClock
from zen_dev.local.compute.__main__ import build_parser

SCENARIO = {"project": "names", "seed": 1, "timings": {"boot": {"dist": "fixed", "s": 60}},
            "capacity": {"schedule": [{"at_s": 0, "zone": "us-central1-a", "capacity": 4}]},
            "migs": [{"name": "zen-1xl4-us-central1", "region": "us-central1", "zones": ["us-central1-a"],
                      "machine_type": "g2-standard-8"}]}


def names(monkeypatch, tmp_path, salt: str) -> list[str]:
    standin = ComputeStandIn(SCENARIO, clock=ManualClock(), log_dir=tmp_path, names_salt=salt).start()
    try:
        monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
        mig = MigManager("names", "us-central1", "zen-1xl4-us-central1", *compute_clients_from_env())
        mig.resize(3)
        return sorted(i.name for i in mig.read().instances)
    finally:
        standin.stop()


def test_names_repeat_with_the_same_salt_and_differ_with_another(monkeypatch, tmp_path):
    first, again, other = (names(monkeypatch, tmp_path, salt) for salt in ("", "", "/1f3a"))
    assert first == again and not set(first) & set(other)


def test_a_stand_in_started_as_a_program_draws_its_salt():
    assert build_parser().parse_args(["--scenario", "x.yaml"]).names_salt is None  # drawn in main()
