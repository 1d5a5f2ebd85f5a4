"""The ``zen`` command: one module per group of commands, wired in ``zen.cli.main.main``."""
