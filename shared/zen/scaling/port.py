"""The MIG port: what the scaling managers need from a regional Managed Instance Group.

``ClusterManager`` talks to MIGs only through ``MigPort``; ``zen.scaling.mig.MigManager`` is the
adapter over google-cloud-compute (the only module that imports it), and the simulator and tests may
bring their own. The types here are plain data: importing this module loads no SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from zen.scaling.model import ErrorKind, MigError


class MigApiError(RuntimeError):
    """A Compute call failed in a way a later retry may fix (the tick tries again)."""


class MigNotFound(MigApiError):
    """The MIG does not exist: terraform has not created it (a configuration problem)."""


class MigRateLimited(MigApiError):
    pass


@dataclass(frozen=True)
class MigInstance:
    name: str
    zone: str | None
    current_action: str  # CREATING, NONE, DELETING, RECREATING, ...
    status: str  # PROVISIONING, STAGING, RUNNING, STOPPING, TERMINATED, or "" before a VM exists
    creation_error: ErrorKind | None

    @property
    def running(self) -> bool:
        return self.current_action == "NONE" and self.status == "RUNNING"

    @property
    def deleting(self) -> bool:
        return self.current_action in ("DELETING", "ABANDONING")


@dataclass(frozen=True)
class MigSummary:
    target_size: int
    stable: bool  # no instance is being created, deleted, recreated, ...


@dataclass(frozen=True)
class MigState:
    target_size: int
    instances: list[MigInstance]
    errors: list[MigError]


class MigPort(Protocol):
    project: str
    region: str
    name: str

    def region_summaries(self) -> dict[str, MigSummary]:
        """Every MIG of this MIG's region: name -> target size and stability (one call)."""

    def read(self, since: datetime | None = None, summary: MigSummary | None = None) -> MigState:
        """Target size, instances, and creation errors after ``since``."""

    def target_size(self) -> int: ...

    def resize(self, size: int) -> None:
        """Set the target size (absolute)."""

    def delete_instances(self, names: list[str], zones: dict[str, str | None]) -> None:
        """Delete exactly these instances, lowering the target size."""
