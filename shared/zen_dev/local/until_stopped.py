"""How each stand-in's ``main`` serves until SIGINT or SIGTERM.

A handler that sets a ``threading.Event`` the main thread waits on is not enough: Python runs a
handler in the main thread only, between two bytecodes, and a signal the kernel hands to one of the
server's threads (any thread may take a signal sent to the process) leaves the main thread asleep
in ``Event.wait()`` until something else wakes it. The stand-in then ignored the SIGTERM it was
stopped with (1 start in 150 on a loaded machine) and was killed 30 s later.

So the main thread waits on a pipe instead, which Python's C-level handler writes the signal's
number to (``signal.set_wakeup_fd``) in whichever thread it runs. Blocking the signals in every
thread and ``sigwait`` would do as well, but the mask would pass to every process the stand-in
starts (the Compute stand-in's VMs, whose agents are stopped by SIGTERM).
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Callable, Iterator

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextmanager
def stop_signals_heard() -> Iterator[Callable[[], signal.Signals]]:
    """Hear SIGINT and SIGTERM within; yields the wait for the first of them. From the main thread only.

    A second signal before leaving (while the stand-in stops, within) changes nothing; on leaving, the
    handlers are as they were.
    """
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous_fd = signal.set_wakeup_fd(write)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in STOP_SIGNALS}

    def wait() -> signal.Signals:
        while True:  # the pipe hears every signal Python handles; the others are not a stop
            number = os.read(read, 1)[0]
            if number in STOP_SIGNALS:
                return signal.Signals(number)

    try:
        yield wait
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(read)
        os.close(write)
