"""The capacity model the Compute stand-in and the simulator share: traces, scenarios, YAML line maps."""
