"""The "guest OS" of a stand-in VM: one startup subprocess per booted VM.

The command is an argv list (never a shell). It runs in its own process group with the parent's
environment plus ``ZEN_VM_NAME``, ``ZEN_CLUSTER``, ``ZEN_REGION``, ``ZEN_ZONE``, ``ZEN_PROJECT`` and
``ZEN_MIG``; stdout and stderr are appended to ``<log_dir>/<vm>.log``. Stopping a VM sends SIGTERM
to the group and SIGKILL after ``grace_s`` real seconds. The local stack's command, ``python -m zen.agent``, is
forked from one process that imported the agent's libraries once (``VmProcesses._boot``), and runs as that
command would; its processes end with the stand-in's.

Every start is a new boot of the VM (a MIG's recreated VM keeps its name): what its agent keeps on its disk for one
boot, its retirement (``zen.agent.retired``), goes first. GCE's recreated VM has a new disk and a new boot id; a
stand-in VM shares this machine's boot id and the work directory, and its agent took its predecessor's retirement
for an earlier agent's of its boot: RETIRED from its first heartbeat, and deleted, where GCE's takes jobs.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from zen.agent.retired import path_for as retired_mark
from zen.agent.settings import work_dir_of

if TYPE_CHECKING:
    from zen_dev.local.functions_server import ForkedGroup, WarmForks

log = logging.getLogger("zen_dev.local.compute")


class VmProcess:
    def __init__(self, vm: str, proc: subprocess.Popen | ForkedGroup):
        self.vm = vm
        self.proc = proc
        self.exited = threading.Event()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal_group(self, sig: int) -> None:
        """Signal the whole process group (the group outlives its leader while children run)."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class VmProcesses:
    """Starts and stops VM startup processes; does nothing when ``command`` is None."""

    def __init__(
        self,
        command: Sequence[str] | None,
        log_dir: str | os.PathLike,
        *,
        grace_s: float = 5.0,
        extra_env: Mapping[str, str] | None = None,
    ):
        self.command = list(command) if command else None
        self.log_dir = Path(log_dir)
        self.grace_s = grace_s
        self.extra_env = dict(extra_env or {})
        self._lock = threading.Lock()
        self._current: dict[str, VmProcess] = {}
        self._all: list[VmProcess] = []
        self._forks: WarmForks | None = None

    def start(self, vm: str, env: Mapping[str, str], note: str = "") -> VmProcess | None:
        if not self.command:
            return None
        self.stop(vm)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{vm}.log"
        full_env = {**os.environ, **self.extra_env, **env}
        try:  # a new boot: the retirement an agent of the VM's last boot kept is not this one's
            retired_mark(work_dir_of(full_env), vm).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("VM %s: cannot clear its last boot's retirement: %s", vm, exc)
        with open(log_path, "ab") as out:
            out.write(f"=== zen compute stand-in: starting {vm} {note}===\n".encode())
            out.flush()
            try:
                proc = self._boot(full_env, log_path)
            except (OSError, RuntimeError) as exc:
                out.write(f"=== cannot start {self.command!r}: {exc} ===\n".encode())
                log.error("VM %s: cannot start its startup command: %s", vm, exc)
                return None
        handle = VmProcess(vm, proc)
        threading.Thread(target=self._reap, args=(handle,), name=f"reap-{vm}", daemon=True).start()
        with self._lock:
            self._current[vm] = handle
            self._all.append(handle)
        log.info("VM %s: startup command running as pid %d (log %s)", vm, proc.pid, log_path)
        return handle

    def _boot(self, env: dict[str, str], log_path: Path) -> subprocess.Popen | ForkedGroup:
        """The startup command's process. ``python -m zen.agent`` (the local stack's) is forked from one process
        that imported the agent's libraries at the first boot (``WarmForks``): each boot's own import cost about
        0.5 s of CPU, most of a short-lived VM's agent (2 cores, 2026-12-07)."""
        assert self.command is not None
        from zen_dev.local.functions_server import AGENT_WARM, WarmForks, start_logged  # (functions-framework's)

        forks = None
        if self.command == [sys.executable, "-m", "zen.agent"]:
            with self._lock:
                if self._forks is None:
                    self._forks = WarmForks(AGENT_WARM)
                forks = self._forks
        return start_logged(self.command, env, log_path, forks)

    def _reap(self, handle: VmProcess) -> None:
        code = handle.proc.wait()
        handle.exited.set()
        log.info("VM %s: startup process %d exited with %s", handle.vm, handle.pid, code)
        with self._lock:
            if self._current.get(handle.vm) is handle:
                del self._current[handle.vm]

    def pid(self, vm: str) -> int | None:
        with self._lock:
            handle = self._current.get(vm)
        return handle.pid if handle else None

    def stop(self, vm: str, grace_s: float | None = None) -> None:
        """SIGTERM the VM's process group now, SIGKILL it after ``grace_s`` (default: the grace period)."""
        with self._lock:
            handle = self._current.pop(vm, None)
        if handle is None or handle.exited.is_set():
            return
        handle.signal_group(signal.SIGTERM)
        threading.Thread(target=self._kill_later, args=(handle, self.grace_s if grace_s is None else grace_s),
                         name=f"kill-{vm}", daemon=True).start()

    def _kill_later(self, handle: VmProcess, grace_s: float) -> None:
        if not handle.exited.wait(grace_s):
            log.warning("VM %s: pid %d ignored SIGTERM; sending SIGKILL", handle.vm, handle.pid)
        handle.signal_group(signal.SIGKILL)  # also catches children left in the group

    def stop_all(self) -> None:
        """Stop every VM process and wait (at most the grace period, then SIGKILL) for them."""
        with self._lock:
            handles = [h for h in self._all if not h.exited.is_set()]
            self._current.clear()
        for handle in handles:
            handle.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for handle in handles:
            handle.exited.wait(max(0.0, deadline - time.monotonic()))
        for handle in handles:
            handle.signal_group(signal.SIGKILL)
            handle.exited.wait(5.0)
        with self._lock:
            forks, self._forks = self._forks, None
        if forks is not None:
            forks.close()
