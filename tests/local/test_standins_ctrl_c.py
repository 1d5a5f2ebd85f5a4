"""The stand-ins docs/how-to/local.md starts one by one end on Ctrl-C without a traceback (three printed
KeyboardInterrupt's, the Pub/Sub, Secret Manager and Compute ones did not)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest


def ctrl_c_heard() -> None:
    """The child's SIGINT as a terminal's Ctrl-C finds it: a shell's background job (``make test &``) starts with it
    ignored, and a Python started so never raises KeyboardInterrupt: the test waited on its output for ever."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("argv", [
    ["zen_dev.local.storage", "--port", "0"],
    ["zen_dev.local.billing", "--port", "0"],
    ["zen_dev.local.webhook_sink", "--port", "0", "--out", "{tmp}/posts.jsonl"],
])
def test_a_stand_in_ends_quietly_on_ctrl_c(argv, tmp_path):
    for _ in range(4):  # as soon as its line is read: a Ctrl-C then landed within the print, 1 in 7 times
        process = subprocess.Popen([sys.executable, "-m", *[a.format(tmp=tmp_path) for a in argv]],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_heard)
        try:
            assert process.stdout is not None and process.stdout.readline()  # serving
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=20)
        finally:
            process.kill()
        assert process.returncode == 0 and "Traceback" not in err, err
