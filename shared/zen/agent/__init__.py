"""The VM agent: one per GPU VM, run as ``python -m zen.agent`` (``zen agent``).

It pulls a start message from its (cluster, region) subscription, claims the attempt and waits on its
own control subscription for Zen's answer, runs the job (a container; a process in local mode),
heartbeats, reports the outcome, and pulls the next job. This module imports nothing heavy:
``launch.py`` runs beside every job (standard library only).
What it does and why, module by module: docs/reference/agent.md
"""
