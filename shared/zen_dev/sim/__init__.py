"""Zen's scaling simulator: the same planner against simulated MIGs, capacity and job traces.

- :mod:`zen_dev.sim.scenario`: the scenario file format (clusters, zones, capacity schedules or trace
  replay, boot delays, preemptions) and the built-in scenarios in ``scenarios/``.
- :mod:`zen_dev.sim.jobs`: job traces (synthetic, Philly, Zen CSV) and their formats.
- :mod:`zen_dev.sim.world`: the discrete-event world (passes, agents, jobs, API calls), with
  :mod:`zen_dev.sim.instances` (instances, zone capacity, spot preemptions, billing).
- :mod:`zen_dev.sim.heldout`: benchmark scenarios generated from the shared GCP trace (never tuned on).
- :mod:`zen_dev.sim.policies`: ``zen`` and the baselines (ask-every-region, failover, single-region, unlimited).
- :mod:`zen_dev.sim.metrics`: what a run measures; :mod:`zen_dev.sim.report`: tables, CSV/JSON, plot.
- :mod:`zen_dev.sim.cli`: ``zen simulate``; :mod:`zen_dev.sim.bench`: ``make bench``.
"""
