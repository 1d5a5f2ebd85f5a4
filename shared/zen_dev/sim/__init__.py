"""Zen's scaling simulator: the same planner against simulated MIGs, capacity and job traces.

``scenario`` and ``jobs`` (file formats, built-in scenarios), ``world`` with ``instances``, ``ports``
and ``routing`` (the discrete-event world), ``policies`` (zen and the baselines), ``metrics`` and
``report`` (what a run measures, tables, files, ``plot``), ``heldout`` and ``fairness`` (benchmark
scenarios), ``cli`` (``zen simulate``) and ``bench`` (``make bench``).
Reference: docs/reference/simulator.md; figures: docs/benchmarks/simulator.md
"""
