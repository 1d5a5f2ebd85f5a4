"""A CloudEvent function ``tests/local/test_warm_forks_module.py`` serves from a forked group: at its import it says on
stdout how its stdout is buffered."""

import sys

print("stdout", type(sys.stdout.buffer).__name__, sys.stdout.write_through, flush=True)


def said(event) -> None:
    """Takes any event and does nothing with it."""
