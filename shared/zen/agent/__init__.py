"""The VM agent: one per GPU VM, run as ``python -m zen.agent`` (``zen agent``).

It pulls one start message at a time from its (cluster, region) subscription on ``zen-job-start``,
claims the attempt with a CLAIMED heartbeat while keeping the message leased, and waits on its own
control subscription (``zen-vm-control``, filtered to its VM name) for the scheduler's answer:
CONFIRM (run it), RELEASE (drop it) or STOP. It runs the job as a subprocess or a container,
heartbeats while it runs, reports the outcome, reports the VM IDLE and pulls the next job.

Modules, by responsibility:
  settings.py   tunables from ``ZEN_AGENT_*`` environment variables
  identity.py   who this VM is (environment, or the GCE metadata server) and preemption notices
  runner.py     runs one job: argv (process or ``docker run``), process group, output tail, stop
  launch.py     the job's supervisor: dies with the agent (parent-death signal), and fences the job
                when the agent stops renewing the attempt's lease (zen.agent.fence)
  container.py  what a job's container may do: user, capabilities, read-only root, limits, network
  removal.py    removes a job's container after it, and those an earlier agent left
  backoff.py    waits between claims Zen refused (and retires a VM told it is draining)
  transport.py  the Pub/Sub adapter (official client only) with bounded retries
  reports.py    builds heartbeats: per-attempt ``seq``, VM ``seq`` = epoch milliseconds
  agent.py      the loop: pull, claim, run, heartbeat, stop, reuse, shut down
  startup.sh    the instance template's startup script

This package module imports nothing heavy: ``launch.py`` runs beside every job (standard library only).
"""
