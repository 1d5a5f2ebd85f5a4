"""A stand-in stops at the SIGTERM it is sent whichever of its threads the kernel hands it to.

Python runs a signal's handler in the main thread only; a stand-in whose main thread slept in
``Event.wait()`` for a handler to set the event never woke when another thread took the signal
(1 start in 150 on a loaded machine), and was killed 30 s later. Here a thread started before the
stand-in is the only one that does not block SIGTERM, so the kernel hands the signal to it every time.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import yaml

from tests.local.test_compute_standin import BASE

# The sleeping thread takes every SIGTERM: the main thread, and the threads it starts after, block it.
TAKEN_ELSEWHERE = """
import runpy, signal, sys, threading, time
threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module, args, ready", [
    ("zen_dev.local.pubsub", ["--port", "0"], "pubsub stand-in listening on "),
    ("zen_dev.local.secret_manager", ["--port", "0"], "ZEN_SECRETS_ENDPOINT="),
    ("zen_dev.local.compute", ["--port", "0", "--scenario", "{scenario}", "--log-level", "WARNING"],
     "compute stand-in listening on "),
], ids=["pubsub", "secret-manager", "compute"])
def test_stand_in_stops_at_a_sigterm_another_thread_takes(tmp_path, module, args, ready) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(BASE))
    args = [arg.format(scenario=scenario) for arg in args]
    process = subprocess.Popen([sys.executable, "-c", TAKEN_ELSEWHERE, module, *args], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith(ready), (line, process.stderr.read() if process.poll() is not None else "")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
