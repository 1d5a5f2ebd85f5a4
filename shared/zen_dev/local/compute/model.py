"""State records of the simulated cloud: managed instances, MIGs and operations (no behaviour
beyond reporting their own status; :mod:`zen_dev.local.compute.world` changes them)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from zen_dev.local.compute.build import MigDef

WAITING, BOOTING, RUNNING, STOPPING, DELETING = "waiting", "booting", "running", "stopping", "deleting"
STOCKOUT = "ZONE_RESOURCE_POOL_EXHAUSTED"
QUOTA = "QUOTA_EXCEEDED"
DELETE_ORDER = {WAITING: 0, STOPPING: 1, BOOTING: 2, RUNNING: 3, DELETING: 4}


class Instance:
    """One managed instance (and, once placed, its VM)."""

    def __init__(self, name: str, mig: "Mig", zone: str, seq: int, created_t: float):
        self.name, self.mig, self.zone, self.seq, self.created_t = name, mig, zone, seq, created_t
        self.phase = WAITING
        self.action = "CREATING"
        self.recreating = False
        self.doomed = False
        self.removed = False
        self.holds = False
        self.vm_id: int | None = None
        self.boot_start = self.boot_end = 0.0
        self.errors: list[tuple[str, str]] = []
        self.gen = 0
        self.preempted = False  # its metadata's instance/preempted (notice.py)
        self.maintenance = False  # its metadata's instance/maintenance-event: TERMINATE_ON_HOST_MAINTENANCE (notice.py)

    def status(self, now: float) -> str | None:
        if self.phase == WAITING:
            return "TERMINATED" if self.recreating else None
        if self.phase == BOOTING:
            provisioned = self.boot_start + 0.25 * (self.boot_end - self.boot_start)
            return "PROVISIONING" if now < provisioned else "STAGING"
        return "RUNNING" if self.phase == RUNNING else "STOPPING"


class Mig:
    def __init__(self, spec: MigDef, project: str, mig_id: int, created_t: float, max_errors: int):
        self.spec, self.project, self.id, self.created_t = spec, project, mig_id, created_t
        self.target_size = 0
        self.instances: dict[str, Instance] = {}
        self.errors: deque[dict[str, Any]] = deque(maxlen=max_errors)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def preemptible(self) -> bool:
        """Spot VMs are (and a MIG of no stated model, as the stand-in always had); standard and flex-start never."""
        return self.spec.model in (None, "spot")

    @property
    def provisioning_model(self) -> str:
        """Its template's ``scheduling.provisioningModel`` as Compute spells it."""
        return {"standard": "STANDARD", "flex-start": "FLEX_START"}.get(self.spec.model or "spot", "SPOT")

    def live(self) -> list[Instance]:
        return [i for i in self.instances.values() if not i.doomed]


@dataclass
class Operation:
    name: str
    id: int
    op_type: str
    project: str
    region: str
    target_link: str
    target_id: int
    insert_t: float
    done_t: float
