"""Local Compute Engine stand-in for regional managed instance groups, with GPU stockouts.

The official ``google-cloud-compute`` client reaches it over REST with anonymous credentials. The
scenario is ``zen_dev.capacity.scenario``; ``build`` makes the MIGs from a Zen config and the scenario,
``world`` simulates them on an injectable clock, ``server`` / ``views`` / ``resources`` serve the REST
surface, ``standin`` composes them (``__main__``: the command), ``client`` points official clients at it.
Format and model: docs/reference/simulator.md
"""

from zen_dev.capacity.scenario import Scenario, load_scenario, parse_scenario
from zen_dev.capacity.traces import UNLIMITED, CapacitySchedule, CapacityTrace, load_trace
from zen_dev.capacity.yamllines import ScenarioError
from zen_dev.local.compute.build import MigDef, build_capacity, migs_from_zen_config, resolve_migs
from zen_dev.local.compute.clock import ManualClock, ScaledClock
from zen_dev.local.compute.standin import ComputeStandIn


def main(argv=None) -> int:
    """Entry point for ``zen local compute`` (see :mod:`zen_dev.local.compute.__main__`)."""
    from zen_dev.local.compute.__main__ import main as _main

    return _main(argv)


__all__ = [
    "UNLIMITED", "CapacitySchedule", "CapacityTrace", "ComputeStandIn", "ManualClock", "MigDef",
    "ScaledClock", "Scenario", "ScenarioError", "build_capacity", "load_scenario", "load_trace",
    "main", "migs_from_zen_config", "parse_scenario", "resolve_migs",
]
