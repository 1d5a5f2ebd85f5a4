"""Run Cloud Functions under functions-framework, each as its own process, as Cloud Run does for gen2.

``functions/main.py`` is served with ``python -m functions_framework --target T --signature-type
cloudevent`` (``FunctionServer``); the environment decides where it connects (``ZEN_DATABASE_URL``,
``PUBSUB_EMULATOR_HOST``, ``ZEN_CONFIG``, ``ZEN_PROJECT``). Several at once (``FunctionGroup``, the local
stack's five): one process imports functions-framework and Zen's libraries once and forks one process per
function, which serves it as ``python -m functions_framework`` does (``create_app``, then its gunicorn
server). ``python -m zen_dev.local.functions_server`` is that process; it reads its functions from stdin.
"""

from __future__ import annotations

import gc
import importlib
import io
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from zen_dev.local.invoke import FUNCTIONS_MAIN


class PortHold:
    """127.0.0.1:``port`` (a free one the kernel picks for 0) held for a server about to start: a socket bound
    to it that does not listen. While it is held, no connection gets the port as its source port and no other
    bind to port 0 gets it, yet a server that binds with SO_REUSEADDR (gunicorn, gRPC and http.server all do)
    binds and listens on it beside the hold: Linux lets sockets that all set SO_REUSEADDR share a port none of
    them listens on. Release it once the server listens. A port picked and let go (bind to 0, close) was
    free only for that moment: on a 2-core machine running four test workers, a function's port was taken in
    the seconds its process took to start, by another worker's pick, and the function never served
    (2026-12-02)."""

    def __init__(self, port: int = 0):
        self._sock = socket.socket()
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind(("127.0.0.1", port))
        except BaseException:
            self._sock.close()
            raise
        self.port: int = self._sock.getsockname()[1]

    def release(self) -> None:
        self._sock.close()

    def __enter__(self) -> "PortHold":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def listening(port: int, sock: socket.socket | None = None) -> bool:
    """Whether something listens on 127.0.0.1:``port``, tried with ``sock`` (a new socket if None). A
    connection to itself does not count: with nothing listening on a port in the kernel's ephemeral range,
    a connect now and then gets that very port as its source and connects to itself (TCP simultaneous
    open; about once in 60,000 tries on a 2-core Linux machine, 2026-12-01), and a stack would go on
    before its function listened."""
    with sock or socket.socket() as probe:
        try:
            return probe.connect_ex(("127.0.0.1", port)) == 0 and probe.getsockname() != probe.getpeername()
        except OSError:  # the listener went between the connect and the question (ENOTCONN)
            return False


def start_logged(argv: list[str], env: dict[str, str], log_path: Path,
                 forks: WarmForks | None = None) -> subprocess.Popen | ForkedGroup:
    """``argv`` in a session of its own, stdin empty, stdout and stderr appended to ``log_path``: forked from
    ``forks`` where one is given and ``argv`` is ``python -m MODULE ...`` (``WarmForks.run_module``), else started."""
    if forks is not None and argv[:2] == [sys.executable, "-m"]:
        return forks.run_module(argv[2], argv[3:], env, log_path)
    with open(log_path, "ab") as out:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait_for_port(port: int, timeout_s: float = 30.0, process: subprocess.Popen | ForkedGroup | None = None) -> None:
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


def stop_session(process: subprocess.Popen | None, grace_s: float = 10.0) -> None:
    """SIGTERM to a server started in a session of its own; SIGKILL to the whole session (its gunicorn
    workers, a group's functions) if it has not ended within ``grace_s``."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


class FunctionServer:
    def __init__(self, target: str, *, port: int | None = None, env: dict[str, str] | None = None,
                 source: Path = FUNCTIONS_MAIN, log_path: Path | None = None):
        self.target = target
        self._hold = PortHold(port or 0)
        self.port = self._hold.port
        self.source = source
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, timeout_s: float = 30.0) -> "FunctionServer":
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        with self._hold:
            self.process = subprocess.Popen(
                function_command(self.target, self.port, self.source), env=self.env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
            wait_for_port(self.port, timeout_s, self.process)
        return self

    def stop(self) -> None:
        stop_session(self.process)

    def __enter__(self) -> "FunctionServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# What a Zen function imports by the end of its first events, imported once by a group: WARM_CORE without
# Compute (``ZEN_SCALING=off``), WARM with it. google-cloud-compute alone costs about 1.9 s of CPU a process
# (2 cores, 2026-12-01); each function of a local stack paid about 1.5-2 s for these before its first answer.
WARM_CORE = ("functions_framework", "functions_framework._http", "functions_framework._http.gunicorn", "zen.app",
             "zen.logs", "google.cloud.pubsub_v1")
WARM = WARM_CORE + ("zen.adapters.compute", "zen.adapters.flex_start", "zen.adapters.quotas", "zen.adapters.billing",
                    "zen.adapters.secret_manager", "zen.adapters.webhooks", "google.cloud.compute_v1",
                    "google.cloud.billing_v1", "google.cloud.secretmanager")

# What ``python -m zen.agent`` has imported once its loop runs (about 0.5 s of CPU, of a test agent's 0.85 s, 2 cores,
# 2026-12-07): what the agent tests' and the Compute stand-in's ``WarmForks`` import once, forking each agent.
AGENT_WARM = ("zen.agent.__main__", "zen.agent.agent", "zen.agent.transport", "google.cloud.pubsub_v1")

# What a local stack's stand-ins, console and bridge import (``LocalStack(forks=)``), beside its functions' WARM.
STACK_WARM = WARM + ("zen_dev.local.pubsub.server", "zen_dev.local.compute.__main__", "zen_dev.local.storage",
                     "zen_dev.local.billing", "zen_dev.local.webhook_sink", "zen_dev.local.secret_manager",
                     "zen_dev.local.bridge", "zen.console.__main__")

# Modules that keep what the environment said when they were imported (google-auth's metadata server's address):
# a module forked from a process that imported one would not see its own (``WarmForks.run_module``).
ENV_AT_IMPORT = ("google.auth.compute_engine._metadata",)


@dataclass(frozen=True)
class Function:
    """One function of a group: ``target`` of ``source`` on 127.0.0.1:``port`` (0: a free one, held by the
    group from before its start; the group's ``functions`` say which), its output appended to ``log_path``
    (else the group's), ``env`` over the group's environment (a function's own database login)."""
    target: str
    port: int
    log_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    source: Path = FUNCTIONS_MAIN

    def spec(self) -> dict:
        return {"target": self.target, "port": self.port, "log": str(self.log_path) if self.log_path else None,
                "env": self.env, "source": str(self.source)}


class WarmForks:
    """A process that imported ``warm`` once and forks a whole group for each ``FunctionGroup`` given it
    (``forks=``): a test worker's agent tests each start a group of three functions, and a group's own process
    importing their libraries cost about 0.65 s of CPU each time (2 cores, 2026-12-06); forked from this one it
    costs a few milliseconds. The group runs as one started alone does: in a session of its own, with the
    group's environment and log. ``close`` ends this process and any group still running."""

    def __init__(self, warm: Sequence[str] = WARM_CORE):
        self._lock = threading.Lock()
        self._astray = False  # a request interrupted before its answer was read (``_ask``)
        self.process = subprocess.Popen([sys.executable, "-m", "zen_dev.local.functions_server", "--forks"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        start_new_session=True)
        self._ask({"warm": list(warm)})

    def _ask(self, request: dict) -> Any:
        with self._lock:
            assert self.process.stdin is not None and self.process.stdout is not None
            if self._astray:
                raise RuntimeError("the forks process's answers are out of step: a request to it was interrupted")
            try:
                self.process.stdin.write(json.dumps(request) + "\n")
                self.process.stdin.flush()
                line = self.process.stdout.readline()
            except BaseException:  # (Ctrl-C, a signal's handler) its answer unread: the next would read it as its own
                self._astray = True
                raise
        if not line:
            raise RuntimeError(f"the forks process ended (exit {self.process.wait(10)}): see the tests' stderr")
        return json.loads(line).get("answer")

    def start(self, functions: Sequence[Function], env: dict[str, str], log_path: Path | None) -> "ForkedGroup":
        return ForkedGroup(self, self._ask({"start": {"env": env, "log": str(log_path) if log_path else None,
                                                      "functions": [f.spec() for f in functions]}}))

    def run_module(self, module: str, args: Sequence[str], env: dict[str, str], log_path: Path | None,
                   cwd: Path | None = None, err_path: Path | None = None) -> "ForkedGroup":
        """``python -m module args`` forked from this process: in a session of its own, stdin empty, stdout and
        stderr appended to ``log_path`` (stderr to ``err_path`` if given), ``env`` its whole environment, ``cwd``
        (else this process's) its directory. It imports what ``warm`` did not, reads its environment as a process
        started anew does (no module ``warm`` names may read one at its import), and ends as one does: its
        threads joined, its exit handlers run, an exception printed with exit 1. Its ``sys.path`` is this
        process's (a ``PYTHONPATH`` in ``env`` adds nothing to it; ``cwd`` is not put first)."""
        return ForkedGroup(self, self._ask({"module": {"name": module, "args": list(args), "env": env,
                                                       "log": str(log_path) if log_path else None,
                                                       "err": str(err_path) if err_path else None,
                                                       "cwd": str(cwd) if cwd else None}}),
                           [sys.executable, "-m", module, *args])

    def run(self, module: str, args: Sequence[str], env: dict[str, str], cwd: Path,
            timeout_s: float) -> subprocess.CompletedProcess:
        """``subprocess.run([python, "-m", module, *args], capture_output=True, text=True)``, forked as
        ``run_module`` forks it (its output kept in two files of a directory of its own until it ends)."""
        with tempfile.TemporaryDirectory(prefix="zen-forked-") as kept:
            out, err = Path(kept) / "stdout", Path(kept) / "stderr"
            process = self.run_module(module, args, env, out, cwd, err)
            try:
                code = process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise
            texts = [path.read_text() if path.exists() else "" for path in (out, err)]
        return subprocess.CompletedProcess([sys.executable, "-m", module, *args], code, *texts)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def __enter__(self) -> "WarmForks":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ForkedGroup:
    """A group (or a module's process) ``WarmForks`` forked, seen as its ``Popen`` would be: ``pid``, ``poll``,
    ``wait``, ``returncode`` (negative: the signal that ended it), ``send_signal``, ``terminate``, ``kill``;
    ``stop`` as ``stop_session`` stops a group started alone."""

    def __init__(self, forks: WarmForks, pid: int, args: list[str] | None = None):
        self._forks = forks
        self.pid = pid
        self.args = args  # a module's: the command it runs as
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._forks._ask({"poll": self.pid})
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"process {self.pid}", timeout or 0)
            self._ended(left)
        return code

    def _ended(self, timeout_s: float | None) -> None:
        """Until the process has ended or ``timeout_s`` has passed: its pidfd is readable once it ends, though
        ``WarmForks``'s process, its parent, reaps it (only when asked: the pid is not given again before)."""
        try:
            ended = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return  # reaped: poll says how it ended
        try:
            select.select([ended], [], [], timeout_s)
        finally:
            os.close(ended)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # as Popen's: never to a pid the kernel may have given again
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def stop(self, grace_s: float = 10.0) -> None:
        if self.returncode is None:
            self.returncode = self._forks._ask({"stop": self.pid, "grace_s": grace_s})


class FunctionGroup:
    """Several functions, one process each, forked from one process that imported their libraries once
    (``warm``): one started for the group or, with ``forks``, that one (``WarmForks``, its own ``warm``)."""

    def __init__(self, functions: Sequence[Function], env: dict[str, str] | None = None,
                 log_path: Path | None = None, warm: Sequence[str] = WARM, forks: WarmForks | None = None):
        self.functions = list(functions)
        self.warm = warm
        self.forks = forks
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.process: subprocess.Popen | ForkedGroup | None = None

    def url(self, target: str) -> str:
        return next(f"http://127.0.0.1:{f.port}/" for f in self.functions if f.target == target)

    def start(self, timeout_s: float = 60.0) -> "FunctionGroup":
        with ExitStack() as holding:
            holds = [holding.enter_context(PortHold(function.port)) for function in self.functions]
            self.functions = [replace(function, port=hold.port) for function, hold in zip(self.functions, holds)]
            self._start(timeout_s)
        return self

    def _start(self, timeout_s: float) -> None:
        if self.forks is not None:
            self.process = self.forks.start(self.functions, self.env, self.log_path)
            self._wait_for_ports(timeout_s)
            return
        # In a session of its own; the functions go over stdin, so their environments (database passwords)
        # are in no argv.
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen([sys.executable, "-m", "zen_dev.local.functions_server"], env=self.env,
                                            stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        finally:
            if self.log_path:
                out.close()
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"warm": list(self.warm),
                                             "functions": [f.spec() for f in self.functions]}).encode())
        self.process.stdin.close()
        self._wait_for_ports(timeout_s)

    def _wait_for_ports(self, timeout_s: float) -> None:
        try:
            for function in self.functions:
                wait_for_port(function.port, timeout_s, self.process)
        except BaseException:
            self.stop()  # none left running behind a failed start
            raise

    def stop(self) -> None:
        # The group passes SIGTERM on and waits for its functions.
        self.process.stop() if isinstance(self.process, ForkedGroup) else stop_session(self.process)

    def __enter__(self) -> "FunctionGroup":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


STOPS = {signal.SIGTERM, signal.SIGINT}


def _serve(spec: dict) -> NoReturn:
    """In a forked process: serve one function as ``python -m functions_framework`` would. Never returns:
    gunicorn forks its worker from here, and neither may run on into the group's loop."""

    def serve() -> int:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # blocked by the group while it forked
        if spec["log"]:
            _output_to(spec["log"])
        os.environ.update(spec["env"])
        from functions_framework import create_app
        from functions_framework._http import create_server

        create_server(create_app(spec["target"], spec["source"], "cloudevent"), False).run("127.0.0.1", spec["port"])
        return 0

    _end_fork(serve)


def _output_to(path: str) -> None:
    """This process's stdout and stderr appended to ``path``."""
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)


def _end_fork(run: Callable[[], int]) -> NoReturn:
    """End a forked process with what ``run`` returns (1 where it raised: printed), its output flushed; it
    never returns into the code that forked it."""
    code = 1
    try:
        code = run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> int:
    """The group: read the functions and the modules to import from stdin, import those, and run the group
    (``_run_group``). With ``--forks``: a process that forks whole groups (``WarmForks``, ``_forks``)."""
    if sys.argv[1:] == ["--forks"]:
        return _forks()
    given = json.loads(sys.stdin.read())
    for name in given["warm"]:
        importlib.import_module(name)
    gc.freeze()  # as _forks
    sys.stdout.flush()
    sys.stderr.flush()
    return _run_group(given["functions"])


def _run_group(specs: list[dict]) -> int:
    """Fork one process per function, pass SIGTERM and SIGINT on to them, and end when one ends (stopping the
    rest) as it ended (its exit code, or its signal), so that whoever started the group sees a function die
    as it saw a lone function server's. Nothing in it may start a thread before the forks (a forked process
    has only the thread that forked); SIGTERM and SIGINT wait while it forks, then reach every function."""
    children: dict[int, str] = {}

    def pass_on(signum, frame) -> None:
        for pid in children:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    signal.signal(signal.SIGTERM, pass_on)
    signal.signal(signal.SIGINT, pass_on)
    for spec in specs:
        pid = os.fork()
        if pid == 0:
            _serve(spec)
        children[pid] = spec["target"]
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # one that came meanwhile is passed on to all now
    first: int | None = None
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        target = children.pop(pid, None)
        if target is None:
            continue
        first = status if first is None else first
        print(f"function {target} ended (exit {os.waitstatus_to_exitcode(status)})", flush=True)
        pass_on(signal.SIGTERM, None)
    if first is not None and os.WIFSIGNALED(first):  # ended as the first function did: by its signal
        if os.WTERMSIG(first) in STOPS:
            signal.signal(os.WTERMSIG(first), signal.SIG_DFL)  # not pass_on (SIGKILL has no handler to reset)
        os.kill(os.getpid(), os.WTERMSIG(first))
    return 0 if first is None else os.waitstatus_to_exitcode(first)


def _forks() -> int:
    """``--forks`` (``WarmForks``'s process): import the modules the first line of stdin names, then answer one
    request a line, one JSON line each on the first stdout (print and a library's output go to stderr):
    ``{"start": {"env", "log", "functions"}}`` forks a group (``_forked_group``) and answers its pid;
    ``{"module": {"name", "args", "env", "log", "cwd"}}`` forks ``python -m name args`` (``_forked_module``), its pid;
    ``{"poll": pid}`` answers its exit code as ``Popen.returncode`` gives it (None while it runs);
    ``{"stop": pid, "grace_s": s}`` SIGTERMs it, SIGKILLs its session after ``grace_s``, answers its code.
    At the end of stdin (the tests' process gone) it SIGKILLs the groups still running and ends."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    for name in json.loads(sys.stdin.readline())["warm"]:
        importlib.import_module(name)
    gc.freeze()  # what the imports built, never walked by a fork's collections (nor copied for them)
    sys.stdout.flush()
    sys.stderr.flush()
    running: set[int] = set()
    ended: dict[int, int] = {}

    def code(pid: int, block: bool = False) -> int | None:
        if pid in running:
            done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            if done:
                running.discard(pid)
                ended[pid] = os.waitstatus_to_exitcode(status)
        return ended.get(pid)

    answers.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if "start" in request or "module" in request:
            pid = os.fork()
            if pid == 0:
                answers.close()
                if "module" in request:
                    _forked_module(request["module"])  # returns only by raising (SystemExit too) to the top
                _forked_group(request["start"])
            ended.pop(pid, None)  # the pid of a group reaped before, used again by the kernel: this one runs
            running.add(pid)
            answer: int | None = pid
        elif "poll" in request:
            answer = code(request["poll"])
        else:
            pid = request["stop"]
            if code(pid) is None:
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + request["grace_s"]
                while code(pid) is None and time.monotonic() < deadline:
                    time.sleep(0.02)
                if code(pid) is None:
                    os.killpg(pid, signal.SIGKILL)
            answer = code(pid, block=True)
        answers.write(json.dumps({"answer": answer}) + "\n")
    for pid in list(running):
        os.killpg(pid, signal.SIGKILL)
        code(pid, block=True)
    return 0


def _forked_group(request: dict) -> NoReturn:
    """In a process ``_forks`` forked: a group as ``python -m zen_dev.local.functions_server`` runs one, in a
    session of its own, with the group's environment (not the forks process's), its output to its log."""

    def run() -> int:
        os.setsid()
        _output_to(request["log"] or os.devnull)
        given = os.open(os.devnull, os.O_RDONLY)
        os.dup2(given, 0)
        os.close(given)
        _environment_as_started(request["env"])
        return _run_group(request["functions"])

    _end_fork(run)


def _forked_module(request: dict) -> NoReturn:
    """In a process ``_forks`` forked: ``python -m name args`` (``WarmForks.run_module``). What ends it (the
    module's ``sys.exit``, an exception) is raised up through ``_forks`` and ``main`` to the interpreter, which
    ends this process as it ends one started anew: non-daemon threads joined, exit handlers run, output flushed."""
    os.setsid()
    _output_to(request["log"] or os.devnull)
    if request.get("err"):
        err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(err, 2)
        os.close(err)
    if read := [name for name in ENV_AT_IMPORT if name in sys.modules]:
        raise RuntimeError(f"{', '.join(read)} read this process's environment at its import, not {request['name']}'s")
    given = os.open(os.devnull, os.O_RDONLY)
    os.dup2(given, 0)
    os.close(given)
    if request["cwd"]:
        os.chdir(request["cwd"])
    _environment_as_started(request["env"])
    sys.argv = [request["name"], *request["args"]]  # the module's file put first, as -m does
    name = request["name"]  # run anew as __main__, as -m runs it (a package's __main__, the package kept)
    sys.modules.pop(f"{name}.__main__" if hasattr(sys.modules.get(name), "__path__") else name, None)
    sys.modules["__main__"] = types.ModuleType("__main__")
    # What -m runs, in a new __main__ kept to the end (runpy.run_module's is put back when the module's code ends,
    # before its threads and exit handlers); a module not found ends as -m ends ("python: No module named ...", 1).
    getattr(runpy, "_run_module_as_main")(name)
    raise SystemExit(0)


def _environment_as_started(env: dict[str, str]) -> None:
    """``env`` this forked process's whole environment, taken as a process started with it takes it: its local time
    zone (``TZ``: the C library read the forking process's at its start; ``time.tzset`` reads it again) and its
    streams' buffering (``_streams_as_started``)."""
    os.environ.clear()
    os.environ.update(env)
    time.tzset()
    _streams_as_started()


def _streams_as_started() -> None:
    """``sys.stdout`` and ``sys.stderr`` as a process started with this environment has them on files: unbuffered
    where ``PYTHONUNBUFFERED`` is set (``python -u``), else stdout in blocks and stderr in lines (the forking
    process's were made for its own environment)."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        stream.flush()
        raw = io.FileIO(fd, "w", closefd=False)
        setattr(sys, name, io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), encoding=stream.encoding,
                                            errors=stream.errors, write_through=unbuffered,
                                            line_buffering=name == "stderr" and not unbuffered))


if __name__ == "__main__":
    sys.exit(main())
