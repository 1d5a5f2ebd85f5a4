"""The ports of the scaling managers: ``MigPort`` (a regional Managed Instance Group) and ``FleetPort``
(Zen's own records of jobs, VMs and agents).

``ClusterManager`` talks to MIGs only through ``MigPort`` and to the database only through
``FleetPort``. In production ``zen.adapters.compute.MigManager`` is the adapter over google-cloud-compute
(the only module that imports it) and ``zen.scaling.fleetdb.FleetDb`` wraps ``zen.store.fleet``; the
simulator brings a simulated MIG and fleet (``zen_dev.sim.ports``) so it runs the production manager,
and the manager's unit tests a recording fake of each. The types here are plain data: importing this
module loads no SDK.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Collection, Iterable, Mapping, Protocol, Sequence

from zen.core.quotas import Quota
from zen.scaling.model import Decision, DemandGroup, ErrorKind, MigError, RegionMemory


class MigApiError(RuntimeError):
    """A Compute call failed in a way a later retry may fix (the tick tries again). ``undeleted``: of a
    ``delete_instances`` that did part of its work, the names it did not delete (None: all of them)."""

    undeleted: frozenset[str] | None = None


class MigNotFound(MigApiError):
    """The MIG does not exist: terraform has not created it (a configuration problem)."""


class MigRateLimited(MigApiError):
    """Compute rate limited a call (429, or 403 ``rateLimitExceeded``: the project's rate quota for a moment): nothing
    is wrong with the MIG or its pool, the next pass asks again. ``added``: of a resize carried out in part before it
    (a flex-start resize's requests made before one was rate limited), the VMs it did add."""

    added: int = 0


class MigBusy(MigApiError):
    """A resize not sent: an earlier write to the MIG (a resize, a deleteInstances) is still in flight, so its target
    size, which the absolute size is computed from, does not show it yet (Compute marks a write DONE once its actions
    are scheduled). Nothing was done; the next pass asks again."""


class MigUnconfirmed(MigApiError):
    """A write that may have been carried out though the call could not confirm it: Compute accepted it
    (``accepted``: answered with an operation) and then the operation could not be read or reported an error before
    it was done, or no answer came (a timeout, a 5xx). A resize so counts toward the cluster's ``max_vms`` all the
    same. An operation done with an error failed: a plain ``MigApiError``, nothing counted."""

    def __init__(self, message: str, accepted: bool = False):
        super().__init__(message)
        self.accepted = accepted


BILLED_STATUSES = frozenset({"RUNNING", "STOPPING", "SUSPENDING"})  # GCE bills a VM from RUNNING


@dataclass(frozen=True)
class MigInstance:
    name: str
    zone: str | None
    current_action: str  # CREATING, NONE, DELETING, RECREATING, ...
    status: str  # PROVISIONING, STAGING, RUNNING, STOPPING, DEPROVISIONING, TERMINATED, ..., or "" before a VM exists
    creation_error: ErrorKind | None

    @property
    def running(self) -> bool:
        return self.current_action == "NONE" and self.status == "RUNNING"

    @property
    def billed(self) -> bool:
        """Its VM is one GCE bills now: RUNNING, or stopping or suspending from it (not before RUNNING)."""
        return self.status in BILLED_STATUSES

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

    def resize(self, size: int, together: Sequence[int] = ()) -> None:
        """Set the target size (absolute); returns once Compute accepted it, without waiting for it to be
        done. Raises ``MigUnconfirmed`` when it may have been carried out, another ``MigApiError`` when not
        (``MigBusy``: an earlier write still in flight, which the target size read before does not show).
        ``together``: of the VMs added, the units that must come whole (gangs), for a MIG that asks for
        VMs in all-or-nothing requests (flex-start); a MIG resized by target size ignores them."""

    def delete_instances(self, names: list[str], zones: dict[str, str | None]) -> Mapping[str, str] | None:
        """Delete exactly these instances, lowering the target size (as ``resize``: never waited on). Returns those
        of them Compute rightly kept, each with why (a flex-start request no longer queued, so not cancelled); None
        or empty: all go. A failure raises ``MigApiError``."""


def whole_units(together: Iterable[int], count: int) -> tuple[int, ...]:
    """The units of ``together`` that fit whole in ``count`` VMs, in order; one that does not fit is left
    out, its VMs (and any others of the ``count``) to be asked for as the rest."""
    kept = []
    for unit in together:
        if 0 < unit <= count:
            kept.append(unit)
            count -= unit
    return tuple(kept)


def resize_requests(together: Iterable[int], count: int) -> tuple[int, ...]:
    """The all-or-nothing requests a flex-start MIG makes for ``count`` VMs: one per unit of ``together``
    that fits whole (``whole_units``), then one per VM of the rest (one-node jobs' VMs: a job waits for no
    other job's grant; one request for all of them waited for a zone to hold them all at once, for ever where
    none could, while a zone held most of them)."""
    units = whole_units(together, count)
    return units + (1,) * (count - sum(units))


class QuotaPort(Protocol):
    """Compute's GPU quotas (``zen.adapters.quotas.QuotaReader``), by metric; raises when they cannot be read."""

    def region(self, region: str, fresh: bool = False) -> dict[str, Quota]: ...

    def project_wide(self, fresh: bool = False) -> dict[str, Quota]: ...


ARRIVALS_WINDOW = timedelta(hours=1)  # FleetFacts.arrivals: the submissions the warm pool is sized by


@dataclass(frozen=True)
class FleetFacts:
    """What a snapshot needs from Zen's own records, read at once (one transaction in production)."""

    # Queued jobs by (priority, allowed pools, start bound), those past their start bound apart from the others.
    demand: tuple[DemandGroup, ...]
    held: dict[str, str]  # VM name -> the job it holds (assigned, running or stopping)
    agents: Mapping[str, Mapping[str, Any]]  # VM name -> its agent's last word: state, idle_since, last_seen_at
    memory: dict[str, RegionMemory]  # region -> the planner's memory
    arrivals: int  # jobs submitted in the last ARRIVALS_WINDOW
    # Optional, from an adapter that knows (the simulator's): (held, agents) of an earlier FleetFacts of
    # this cluster, and the names of the VMs whose entries may differ since. None: unknown.
    changed: tuple[dict[str, str], Mapping[str, Mapping[str, Any]], frozenset[str]] | None = None
    # VMs a scale-down drained (``vm_drains``): they refuse claims, so they are no supply even while their
    # MIG still runs them (a delete that failed). The simulator's deletes never fail: none.
    drained: frozenset[str] = frozenset()
    # When a pass last planned this cluster (its memory recorded): MIG states read before then may miss
    # what that pass changed. None: unknown (the simulator's passes never overlap a tick's reads).
    last_pass_at: datetime | None = None
    # When Zen could hear its agents again after an outage of its own (``zen.store.fleet.heard_since``): a boot
    # across it was not heard. None: no outage known (the simulator's ticks never stop).
    heard_since: datetime | None = None
    # Failed flex-start requests a pass read and dropped unplanned, kept for the next pass (``zen.scaling.reported``):
    # (id, pool, failure), oldest first. The simulator's passes drop no read: none.
    failures: tuple[tuple[int, str, MigError], ...] = ()
    # queued_at of the cluster's oldest QUEUED job, ``demand`` or not: a job no pool serves any longer (its
    # cluster changed while it waited) is no demand, but still waits (``zen_oldest_queued``). None: none, or unknown.
    oldest_queued: datetime | None = None


class PassAsks(Protocol):
    """Passes asked for while another held the cluster (``zen.scaling.asks``; none in the simulator,
    whose passes never overlap)."""

    def ask(self, cluster: str) -> int:
        """Count one ask; returns the new count."""

    def asked(self, cluster: str) -> int: ...


class Hold(Protocol):
    """A cluster's lock as a pass holds it (``zen.store.lease.Lease``): truthy when the pass has the cluster."""

    def __bool__(self) -> bool: ...

    def lost(self) -> bool:
        """Taken, and gone since: the pass stood still past its function's timeout, and another may hold it now."""


@dataclass(frozen=True)
class Kept:
    """A lock that cannot be lost (the simulator's, the fakes'): ``Kept(True)`` held, ``Kept(False)`` not."""

    taken: bool = True

    def __bool__(self) -> bool:
        return self.taken

    def lost(self) -> bool:
        return False


class FleetPort(Protocol):
    """The fleet's records as ``ClusterManager`` needs them: ``zen.scaling.fleetdb.FleetDb`` over
    Postgres in production, the simulated world's records in ``zen_dev.sim.ports``."""

    def cluster_lock(self, cluster: str) -> AbstractContextManager[Hold]:
        """Held for one pass: true when this pass has the cluster, false when another one does."""

    def facts(self, cluster: str, now: datetime) -> FleetFacts: ...

    def memory(self, cluster: str) -> dict[str, RegionMemory]: ...

    def shared_load(self, cluster: str, now: datetime) -> tuple[list[dict[str, Any]], dict[str, tuple[int, int]]]:
        """Queued jobs by (priority, pools as ``regions``, start bound as ``max_wait_s``, GPUs held) and VM
        name -> (jobs, GPUs) it holds. Asked only for a cluster whose VMs run several jobs at once
        (``zen.scaling.sharing``)."""

    def see_instances(self, cluster: str, instances: dict[str, list[str]], now: datetime,
                      billed: dict[str, list[str]] | None = None) -> dict[str, datetime]:
        """Record each region's MIG instances as seen ``now`` (forgetting the vanished ones), and which of
        them GCE bills now (``billed``: RUNNING or past it, ``BILLED_STATUSES``; None: all); returns when
        each was first seen."""

    def drain_unless_busy(self, vm: str, cluster: str, region: str, now: datetime) -> bool:
        """Mark ``vm`` as going away unless it holds a job (its claims are refused from then on)."""

    def record(self, cluster: str, memory: dict[str, RegionMemory], decisions: list[Decision], now: datetime,
               planned: Collection[int] = ()) -> None:
        """Keep the planner's memory (per region; regions not given keep theirs) and the decisions; forget the kept
        failures the pass planned with (``planned``: ids of ``FleetFacts.failures``), in one transaction."""

    def keep_failures(self, cluster: str, failures: Mapping[str, list[MigError]], now: datetime) -> None:
        """Keep failures a pass read and dropped unplanned (pool -> its failed flex-start requests), reported once:
        the cluster's next pass plans with them (``FleetFacts.failures``), whichever function instance runs it."""
