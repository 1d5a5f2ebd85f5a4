"""The job service: submit, heartbeat, stop, claims, the tick's sweeps, and the outbox relay."""
