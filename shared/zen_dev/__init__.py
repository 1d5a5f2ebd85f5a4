"""Development-only parts, never deployed: the local stand-ins and stack, the simulator, the demo,
the embedded Postgres and the capacity model the Compute stand-in and the simulator share."""
