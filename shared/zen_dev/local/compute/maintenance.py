"""A host maintenance event on a stand-in VM of a standard or flex-start MIG, as GCE carries it out for a VM with
GPUs: such a VM cannot live-migrate (terraform's ``on_host_maintenance = "TERMINATE"``), so GCE gives it a notice,
its metadata's ``instance/maintenance-event`` turning from ``NONE`` to ``TERMINATE_ON_HOST_MAINTENANCE``
(``notice.py``) an hour before (GCE gives GPU VMs an hour, other VMs 60 s), then terminates it. Nothing else comes
with the notice: its processes run on until the termination, ``maintenance_notice_s`` real seconds later (a
``ComputeStandIn`` argument, default 3,600; tests give a few seconds),
when they get SIGTERM and SIGKILL the startup's ``stop_grace_s`` after, and the VM is ``STOPPING`` for
``preempt_stop_s``. Then it is ``TERMINATED`` and boots again under the same name: a standard VM restarts
(``automaticRestart``); a flex-start one, which does not, is recreated by its MIG (``RECREATING``), as a MIG repairs
a VM that stopped not by its own doing. A spot VM's maintenance is its preemption (``World.preempt``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from zen_dev.local.compute.model import BOOTING, RUNNING, STOPPING, WAITING, Instance

log = logging.getLogger("zen_dev.local.compute")
NOTICE_S = 3600.0  # GCE: a GPU VM's maintenance-event notice comes an hour before the maintenance


def announce(world: Any, inst: Instance) -> bool:
    """Give ``inst`` its notice and terminate it ``world.maintenance_notice_s`` real seconds later; False when it
    is not booting or running (or already has a notice)."""
    if inst.removed or inst.doomed or inst.phase not in (BOOTING, RUNNING) or inst.maintenance:
        return False
    inst.maintenance = True
    notice_s = getattr(world, "maintenance_notice_s", NOTICE_S)  # (set by ComputeStandIn)
    log.info("%s: %s has a host maintenance notice (terminated in %g s)", inst.mig.name, inst.name, notice_s)
    timer = threading.Timer(notice_s, _terminate, args=(world, inst, inst.gen))
    timer.daemon = True
    timer.start()
    return True


def _terminate(world: Any, inst: Instance, gen: int) -> None:
    with world.lock:
        if inst.gen != gen or inst.removed or inst.doomed:  # deleted (or preempted) meanwhile
            return
        world.advance()
        inst.gen += 1
        world._stop_vm(inst)
        inst.phase = STOPPING
        log.info("%s: %s terminated for host maintenance", inst.mig.name, inst.name)
        world._schedule(world.now + world._timings.preempt_stop_s, _boot_again, world, inst, inst.gen)


def _boot_again(world: Any, inst: Instance, gen: int) -> None:
    if inst.gen != gen or inst.removed:
        return
    world._release(inst)
    restarts = inst.mig.provisioning_model == "STANDARD"  # automaticRestart (views.instance_template)
    inst.phase, inst.recreating, inst.vm_id = WAITING, True, None
    inst.action = "NONE" if restarts else "RECREATING"
    inst.maintenance = False
    world._attempt(inst, inst.gen)
