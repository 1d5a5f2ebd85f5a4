"""A VM's retirement kept on its disk for its boot: an agent systemd restarts (a crash, the OOM killer, a restart by
hand) on a VM an earlier agent of the same boot retired stays retired (``DailyPulls.remember_in``).

Kept in the agent's memory only, the retirement went with the agent: the new one said IDLE and claimed the next job,
and Zen confirmed it (a claim drawn after the RETIRED is taken for a recreated VM's), so a VM retired for a fault of
its own (a GPU fallen off the bus, docker failing, its disk, a container left running) failed or requeued job after
job again, and, IDLE again, was no longer deleted as retired. ``<work_dir>/.retired/<VM name>`` holds the boot's id
(``/proc/sys/kernel/random/boot_id``) and the reason, written whole (another name, renamed); a mark of another boot
is not taken: a reboot ends every container, and the first job to fail on a fault that outlives it retires the VM
again. Best effort: a disk that cannot be written logs once, the retirement staying in memory, as before."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from zen.agent.journal import boot_id
from zen.agent.ranlog import vm_file, write_whole

log = logging.getLogger("zen.agent.retired")


def path_for(work_dir: str | os.PathLike[str], vm: str) -> Path:
    """``<work_dir>/.retired/<VM name>``: the VM's agents' (a VM its MIG recreates gets a new disk, and no mark)."""
    return vm_file(work_dir, ".retired", vm)


class RetiredMark:
    def __init__(self, path: Path, boot: str | None = None) -> None:
        self.path, self.boot = path, (boot_id() or "") if boot is None else boot  # '': unknown, any boot's taken

    def load(self) -> str | None:
        """Why an earlier agent of this boot retired the VM, or None: none did (or of another boot)."""
        try:
            boot, _, reason = self.path.read_text().partition("\n")
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("could not read whether this VM was retired", extra={"path": str(self.path),
                                                                            "error": str(exc)})
            return None
        if boot and self.boot and boot != self.boot:
            return None
        return reason.strip() or "retired by an earlier agent"

    def keep(self, reason: str) -> None:
        """The VM is retired for ``reason``, for the agents of this boot."""
        try:
            write_whole(self.path, f"{self.boot}\n{reason}\n")
        except OSError as exc:
            log.error("could not keep the VM's retirement on disk: a restarted agent may take jobs again",
                      extra={"path": str(self.path), "error": str(exc)})
