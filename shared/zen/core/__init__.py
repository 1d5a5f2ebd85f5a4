"""The pure domain: messages and records, the job state machine, configuration, routing rules. No I/O."""
