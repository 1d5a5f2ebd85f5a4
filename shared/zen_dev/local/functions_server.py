"""Run one Cloud Function under functions-framework as its own process, as Cloud Run does for gen2.

``functions/main.py`` is served with ``python -m functions_framework --target T --signature-type
cloudevent``; the environment decides where it connects (``ZEN_DATABASE_URL``,
``PUBSUB_EMULATOR_HOST``, ``ZEN_CONFIG``, ``ZEN_PROJECT``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from zen_dev.local.invoke import FUNCTIONS_MAIN


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int, sock: socket.socket | None = None) -> bool:
    """Whether something listens on 127.0.0.1:``port``, tried with ``sock`` (a new socket if None). A
    connection to itself does not count: with nothing listening on a port in the kernel's ephemeral range,
    a connect now and then gets that very port as its source and connects to itself (TCP simultaneous
    open; about once in 60,000 tries on a 2-core Linux machine, 2026-12-01), and a stack went on before
    its function listened."""
    with sock or socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0 and probe.getsockname() != probe.getpeername()


def wait_for_port(port: int, timeout_s: float = 30.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening on {port}")
        if listening(port):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


def function_command(target: str, port: int, source: Path = FUNCTIONS_MAIN) -> list[str]:
    """The argv that serves one CloudEvent function on 127.0.0.1:``port``."""
    return [sys.executable, "-m", "functions_framework", "--target", target, "--source", str(source),
            "--signature-type", "cloudevent", "--host", "127.0.0.1", "--port", str(port)]


class FunctionServer:
    def __init__(self, target: str, *, port: int | None = None, env: dict[str, str] | None = None,
                 source: Path = FUNCTIONS_MAIN, log_path: Path | None = None):
        self.target = target
        self.port = port or free_port()
        self.source = source
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, timeout_s: float = 30.0) -> "FunctionServer":
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            function_command(self.target, self.port, self.source), env=self.env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_for_port(self.port, timeout_s, self.process)
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def __enter__(self) -> "FunctionServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
