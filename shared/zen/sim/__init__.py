"""Zen's scaling simulator: the same planner against simulated MIGs, capacity and job traces.

- :mod:`zen.sim.scenario`: the scenario file format (clusters, zones, capacity schedules or trace
  replay, boot delays, preemptions) and the built-in scenarios in ``scenarios/``.
- :mod:`zen.sim.jobs`: job traces (synthetic, Philly, Zen CSV) and their formats.
- :mod:`zen.sim.world`: the discrete-event world (passes, agents, jobs, API calls), with
  :mod:`zen.sim.instances` (instances, zone capacity, spot preemptions, billing).
- :mod:`zen.sim.heldout`: benchmark scenarios generated from the shared GCP trace (never tuned on).
- :mod:`zen.sim.policies`: ``zen`` and the baselines (ask-every-region, failover, single-region, unlimited).
- :mod:`zen.sim.metrics`: what a run measures; :mod:`zen.sim.report`: tables, CSV/JSON, plot.
- :mod:`zen.sim.cli`: ``zen simulate``; :mod:`zen.sim.bench`: ``make bench``.
"""
