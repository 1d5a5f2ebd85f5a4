"""MigManager: the adapter over ``google-cloud-compute`` for one regional Managed Instance Group.

The only scaling module that imports ``google.*``: Compute error codes become ``ErrorKind``,
``currentAction``/``instanceStatus`` a ``MigInstance``, and any failure of a call one of
``MigNotFound`` / ``MigRateLimited`` / ``MigUnconfirmed`` / ``MigApiError``. Every call is bounded
(``CALL_BOUND_S``) and safe to retry; writes carry a ``requestId`` and their operations are not
waited on. ``ZEN_COMPUTE_ENDPOINT`` (``HOST:PORT``) points the client at the local Compute stand-in.
Why: docs/explanations/scaling.md (the bullets on Compute calls)
"""

from __future__ import annotations

import os
import time
import uuid
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Callable, Iterator, Sequence, TypeVar

from google.api_core import exceptions as gexc
from google.api_core.retry import Retry, if_exception_type
from google.cloud import compute_v1

from zen.core.quotas import named
from zen.scaling.model import ErrorKind, MigError
from zen.scaling.port import (  # noqa: F401 - the port's types, importable from the adapter too
    MigApiError, MigBusy, MigInstance, MigNotFound, MigPort, MigRateLimited, MigState, MigSummary, MigUnconfirmed,
)

# Each Compute call's time in all (its requests' timeout, and the deadline of retrying its 5xx answers):
# a region whose Compute fails costs a pass about this per call, not google-cloud-compute's 600 s.
CALL_BOUND_S = 10.0
_R = TypeVar("_R")  # what a Compute call returns
# A write of the MIG's not DONE holds its resizes this long at most (from when a resize first found it so): Compute
# marks a write DONE within seconds, once its actions are scheduled; one that is not by then is stuck.
IN_FLIGHT_HOLD_S = 120.0
# Instances one deleteInstances call takes at most (Compute refuses a longer list whole; a regional MIG holds 2000).
MAX_DELETE_PER_CALL = 1000
_RETRIED = if_exception_type(gexc.InternalServerError, gexc.BadGateway, gexc.ServiceUnavailable, gexc.GatewayTimeout)

_STOCKOUT_CODES = {
    "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "RESOURCE_POOL_EXHAUSTED",
    "insufficientCapacity", "resourcePoolExhausted", "STOCKOUT", "CONDITION_NOT_MET",
}
_QUOTA_CODES = {"QUOTA_EXCEEDED", "quotaExceeded", "REGION_QUOTA_EXCEEDED"}
_RATE_CODES = {"rateLimitExceeded", "RATE_LIMIT_EXCEEDED", "userRateLimitExceeded"}


def error_kind(code: str) -> ErrorKind:
    if code in _STOCKOUT_CODES:
        return ErrorKind.STOCKOUT
    if code in _QUOTA_CODES:
        return ErrorKind.QUOTA
    if code in _RATE_CODES:
        return ErrorKind.RATE_LIMIT
    return ErrorKind.OTHER


def _zone_of(url: str) -> str | None:
    parts = url.split("/")
    return parts[parts.index("zones") + 1] if "zones" in parts else None


def compute_clients_from_env() -> tuple[compute_v1.RegionInstanceGroupManagersClient, compute_v1.RegionOperationsClient]:
    endpoint = os.environ.get("ZEN_COMPUTE_ENDPOINT")
    if not endpoint:
        return compute_v1.RegionInstanceGroupManagersClient(), compute_v1.RegionOperationsClient()
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.compute_v1.services.region_instance_group_managers.transports.rest import (
        RegionInstanceGroupManagersRestTransport,
    )
    from google.cloud.compute_v1.services.region_operations.transports.rest import RegionOperationsRestTransport

    host = endpoint.removeprefix("http://")
    credentials = AnonymousCredentials()
    migs = compute_v1.RegionInstanceGroupManagersClient(
        transport=RegionInstanceGroupManagersRestTransport(host=host, credentials=credentials, url_scheme="http"))
    operations = compute_v1.RegionOperationsClient(
        transport=RegionOperationsRestTransport(host=host, credentials=credentials, url_scheme="http"))
    return migs, operations


def raise_first(failed: list[MigApiError], left: set[str]) -> None:
    """A delete that tried everything: the first failure, naming the instances it left (``MigApiError.undeleted``:
    the others are going), or nothing when none failed."""
    if failed:
        failed[0].undeleted = frozenset(left)
        raise failed[0]


class MigManager:
    def __init__(self, project: str, region: str, name: str,
                 migs: compute_v1.RegionInstanceGroupManagersClient,
                 operations: compute_v1.RegionOperationsClient, call_bound_s: float | None = None):
        self.project, self.region, self.name = project, region, name
        self._migs = migs
        self._operations = operations
        self._bound_s = CALL_BOUND_S if call_bound_s is None else call_bound_s
        self._retry = Retry(predicate=_RETRIED, initial=0.25, maximum=2.0, multiplier=2.0, timeout=self._bound_s)
        self.api_calls = 0
        self._in_flight: dict[str, float] = {}  # operation name -> when a resize first found it not DONE (monotonic)

    @contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        """Any exception inside becomes a ``MigApiError`` (see the module's docstring)."""
        try:
            yield
        except MigApiError:
            raise
        except gexc.NotFound as exc:
            raise MigNotFound(f"MIG {self.name} in {self.region} not found: {exc.message}") from exc
        except (gexc.TooManyRequests, gexc.Forbidden) as exc:
            if isinstance(exc, gexc.TooManyRequests) or _rate_limit(exc):  # Compute says 403 rateLimitExceeded
                raise MigRateLimited(f"rate limited on {self.name}: {exc.message}") from exc
            raise MigApiError(f"{what} on {self.name} failed: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - transport, auth, parse: the next pass tries again
            raise MigApiError(f"{what} on {self.name} failed: {type(exc).__name__}: {exc}") from exc

    def _call(self, method: Callable[..., _R], **fields: Any) -> _R:
        """One call on this MIG, bounded (``CALL_BOUND_S``)."""
        self.api_calls += 1
        request = {"project": self.project, "region": self.region, "instance_group_manager": self.name, **fields}
        with self._translated(method.__name__):
            return method(request=request, retry=self._retry, timeout=self._bound_s)

    def target_size(self) -> int:
        return self._call(self._migs.get).target_size

    def instances(self) -> list[MigInstance]:
        out = []
        pages = self._call(self._migs.list_managed_instances)
        with self._translated("list_managed_instances"):  # later pages are fetched while iterating
            for item in pages:
                errors = item.last_attempt.errors.errors if item.last_attempt and item.last_attempt.errors else []
                out.append(MigInstance(
                    name=item.name or item.instance.rsplit("/", 1)[-1],
                    zone=_zone_of(item.instance),
                    current_action=item.current_action or "NONE",
                    status=item.instance_status or "",
                    creation_error=error_kind(errors[-1].code) if errors else None,
                ))
        return out

    def errors(self, since: datetime | None = None) -> list[MigError]:
        """Creation errors (listErrors), oldest first, optionally only those after ``since``."""
        out = []
        pages = self._call(self._migs.list_errors)
        with self._translated("list_errors"):  # later pages are fetched while iterating
            for item in pages:
                at = datetime.fromisoformat(item.timestamp.replace("Z", "+00:00"))
                if since is not None and at <= since:
                    continue
                instance = item.instance_action_details.instance if item.instance_action_details else None
                out.append(MigError(self.region, error_kind(item.error.code), at,
                                    instance.rsplit("/", 1)[-1] if instance else None, quota=named(item.error.message)))
        return sorted(out, key=lambda e: e.at)

    def region_summaries(self) -> dict[str, "MigSummary"]:
        """Every MIG of this region (one ``list`` call, paged): name -> target size and stability."""
        self.api_calls += 1
        try:
            pages = self._migs.list(request={"project": self.project, "region": self.region},
                                    retry=self._retry, timeout=self._bound_s)
            return {m.name: MigSummary(m.target_size, bool(m.status and m.status.is_stable)) for m in pages}
        except Exception as exc:  # noqa: BLE001 - any failure (see the module's docstring): read each MIG instead
            raise MigApiError(f"listing the MIGs of {self.region} failed: {type(exc).__name__}: {exc}") from exc

    def read(self, since: datetime | None = None, summary: "MigSummary | None" = None) -> "MigState":
        """The MIG's target size, instances and creation errors after ``since``.

        With ``summary`` (from ``region_summaries``, which the tick reads once per region) the target
        size is not asked again, and an empty, stable MIG costs no call at all. ``listErrors`` is
        skipped when every instance the target asks for exists and none is being created: creation
        errors come only from instances being created, and earlier ones were read by earlier passes."""
        if summary is not None and summary.target_size == 0 and summary.stable:
            return MigState(0, [], [])
        target = summary.target_size if summary is not None else self.target_size()
        instances = self.instances()
        settled = len(instances) == target and all(i.current_action == "NONE" for i in instances)
        return MigState(target, instances, [] if settled else self.errors(since))

    def resize(self, size: int, together: Sequence[int] = ()) -> None:
        """Set the target size (absolute, so a retry after a timeout changes nothing); ``together`` is
        ignored: a MIG resized by target size creates each VM on its own, there is no request to split.
        Not over a write still in flight (``_settled``): ``size`` was computed from a target that does not show it.
        Never to a size at or below the target read just before: a pass that stood still between its read and this
        write (a request cut at its function's timeout, resumed once a later pass had grown the MIG) would have
        lowered it, and GCE chooses which VMs a lower target deletes, running jobs' among them."""
        self._settled()
        if (target := self.target_size()) >= size:  # read again now: never a resize that lowers the target
            raise MigBusy(f"not resized: the target size of {self.name} is {target} already, not below the {size} "
                          "asked for (computed from an older read)")
        self._write(self._migs.resize_unary, size=size)

    def _settled(self) -> None:
        """Wait, one call's bound in all, for this MIG's writes whose operations are not DONE (any pass's, any
        instance's: a delete of idle VMs the last pass made, say), and raise ``MigBusy`` if one still is not. Compute
        marks a resize or a delete DONE once its actions are scheduled; until then the target size does not show it,
        and a size computed from it undid it once landed (the deleted VMs booted again, for nothing). Operations that
        cannot be listed hold nothing back, nor one this instance saw in flight ``IN_FLIGHT_HOLD_S`` ago: the resize
        goes as it always did (a write stuck in flight would otherwise keep its pool from every VM)."""
        now = time.monotonic()
        deadline = now + self._bound_s
        try:
            pending = self._writes_in_flight()
        except MigApiError:
            return
        self._in_flight = {name: self._in_flight.get(name, now) for name in pending}  # (those done forgotten)
        for name in pending:
            if now - self._in_flight[name] > IN_FLIGHT_HOLD_S:
                continue  # in flight this long, it is stuck, not landing: it holds the MIG no longer
            left = deadline - time.monotonic()
            try:
                with self._translated(f"waiting for operation {name}"):
                    self.api_calls += 1
                    done = left > 0 and self._operations.wait(request={"project": self.project, "region": self.region,
                                                                       "operation": name}, retry=None, timeout=left
                                                              ).status == compute_v1.Operation.Status.DONE
            except MigApiError:
                done = False
            if not done:
                raise MigBusy(f"not resized: operation {name} on {self.name} is not done yet, and the target size "
                              "does not show it")

    def _writes_in_flight(self) -> list[str]:
        """The names of the operations on this MIG that are not DONE (one ``regionOperations.list``, filtered)."""
        self.api_calls += 1
        suffix = f"/instanceGroupManagers/{self.name}"
        with self._translated("listing operations"):  # later pages are fetched while iterating
            pages = self._operations.list(request={"project": self.project, "region": self.region,
                                                   "filter": "status != DONE"}, retry=self._retry, timeout=self._bound_s)
            return [op.name for op in pages
                    if op.status != compute_v1.Operation.Status.DONE and (op.target_link or "").endswith(suffix)]

    def delete_instances(self, names: list[str], zones: dict[str, str | None]) -> dict[str, str] | None:
        """Delete exactly these instances (lowering the target size); ones already gone are skipped."""
        if not names:
            return None
        # Compute wants zones/Z/instances/N; a name the listing gave no zone for (an instance not created
        # yet) goes in a call of its own, so that, should Compute refuse it, the others are deleted. At most
        # MAX_DELETE_PER_CALL a call: a longer list was refused whole, pass after pass, its VMs drained and billed.
        # A failure names what it left (``MigApiError.undeleted``): the other calls' instances are going.
        failed: list[MigApiError] = []
        left: set[str] = set()
        for whole in ([n for n in names if zones.get(n)], [n for n in names if not zones.get(n)]):
            for start in range(0, len(whole), MAX_DELETE_PER_CALL):
                batch = whole[start:start + MAX_DELETE_PER_CALL]
                request = compute_v1.RegionInstanceGroupManagersDeleteInstancesRequest(
                    instances=[f"zones/{zones[n]}/instances/{n}" if zones.get(n) else n for n in batch],
                    skip_instances_on_validation_error=True)
                try:
                    self._write(self._migs.delete_instances_unary,
                                region_instance_group_managers_delete_instances_request_resource=request)
                except MigApiError as exc:
                    failed.append(exc)
                    left.update(batch)
        raise_first(failed, left)
        return None

    def _write(self, method: Callable[..., compute_v1.Operation], **fields: Any) -> None:
        """A resize or delete (its own ``requestId``), then what its operation says at once (``_check``)."""
        try:
            operation = self._call(method, request_id=str(uuid.uuid4()), **fields)
        except MigApiError as exc:
            if isinstance(exc.__cause__, gexc.ClientError):  # refused (a 4xx): nothing was done
                raise
            raise MigUnconfirmed(f"{exc} (sent: it may still be carried out)") from exc
        self._check(operation)

    def _check(self, operation: compute_v1.Operation) -> None:
        """Fail on an error a write's operation reports at once; never wait for it to be DONE (see the
        module's docstring): one ``regionOperations.get``, answered at once, if it is not DONE yet."""
        name = getattr(operation, "name", None)
        if name and operation.status != compute_v1.Operation.Status.DONE:
            self.api_calls += 1
            try:
                with self._translated(f"reading operation {name}"):
                    operation = self._operations.get(request={"project": self.project, "region": self.region,
                                                              "operation": name}, retry=None, timeout=self._bound_s)
            except MigApiError as exc:
                raise MigUnconfirmed(f"{exc} (accepted: it may still be carried out)", accepted=True) from exc
        error = getattr(operation, "error", None)
        errors = getattr(error, "errors", None) if error else None
        if errors and operation.status == compute_v1.Operation.Status.DONE:  # done, and failed: nothing was resized
            raise MigApiError(f"operation {name} on {self.name} failed: {errors[0].code}: {errors[0].message}")
        if errors:
            raise MigUnconfirmed(f"operation {name} on {self.name} reports {errors[0].code}: {errors[0].message}",
                                 accepted=True)


_ADAPTS: type[MigPort] = MigManager  # the type checker holds the adapter to its port

def _rate_limit(exc: Exception) -> bool:
    """A 403 that is a rate limit (``rateLimitExceeded`` / ``userRateLimitExceeded``), not a permission."""
    reasons = {getattr(exc, "reason", None)} | {e.get("reason") for e in getattr(exc, "errors", None) or ()
                                                if isinstance(e, dict)}
    return bool(reasons & {"rateLimitExceeded", "userRateLimitExceeded"})
