"""FlexStartMig: the MIG port over a flex-start pool's regional MIG, grown by resize requests.

Dynamic Workload Scheduler's flex-start VMs are not asked for by target size: each ``resize`` inserts
resize requests (``regionInstanceGroupManagerResizeRequests.insert``, google-cloud-compute's
``RegionInstanceGroupManagerResizeRequestsClient``, in the pinned 1.57.0 as in the v1 API) for the VMs
it adds: one per gang asked for (``together``), one per VM of the rest. Compute queues each (CREATING, then
ACCEPTED) and grants it all at once when capacity frees up: its VMs then join the MIG, whose target size
grows by the request's ``resizeBy``, and run for the cluster's ``flex_start_run_s`` at most. The
regional client, not the zonal one: Zen's MIGs are regional.

To the scaling manager a pending request's VMs are instances like any other: BOOTING and not started
(no status, so not billed), named ``<MIG>+<request>+<n>`` (``pending_name``; ``+`` is in no GCE name, so
no agent, claim or control subscription ever takes one for a VM), counted in the target size, so the
cluster's limits hold (should Compute list a queued request's instances itself, CREATING with no VM, as
its documentation of the CREATING state suggests, those beyond the target size stand for it instead and
none is made up: see ``read``). Deleting any of them cancels its request (``cancel``, possible while it is
ACCEPTED): a request is granted all at once or not at all, so it goes whole; the planner sees the rest
go too and asks again if it still wants VMs. Everything else (errors, deletes of real VMs, operations)
is ``MigManager``'s.

Compute keeps a request that has ended (SUCCEEDED, FAILED, CANCELLED) until it is deleted, and each pass
lists them all: a cluster asking every few minutes would page through thousands within weeks. A read
deletes a few ended ones (``FORGET_PER_READ``): a failed or cancelled one at once (it holds no VM), a
granted one once its requested run duration is over (a delete leaves a request's VMs as they are, Compute's
reference says; Zen deletes those as any other VM). A delete that fails is tried again by a later read; it never fails
the read.
"""

from __future__ import annotations

import logging
import os
import uuid
from datetime import datetime, timedelta, timezone
from typing import Callable, Sequence

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from zen.adapters.compute import MigManager, error_kind, raise_first
from zen.core.clock import utc_now
from zen.core.provisioning import PENDING_SEP
from zen.core.quotas import named
from zen.scaling.model import ErrorKind, MigError
from zen.scaling.port import (
    MigApiError, MigInstance, MigPort, MigRateLimited, MigState, MigSummary, MigUnconfirmed, resize_requests,
)

_PENDING = {"CREATING", "ACCEPTED"}  # queued: no VM yet (CREATING: the request itself is being created)
_ENDED = {"FAILED", "CANCELLED"}  # no VM was made: deleted at once
FORGET_PER_READ = 5  # ended requests deleted by one read at most, FAILED ones aside (each a write call)

log = logging.getLogger(__name__)


def resize_requests_client_from_env() -> compute_v1.RegionInstanceGroupManagerResizeRequestsClient:
    """The resize-requests client, pointed at ``ZEN_COMPUTE_ENDPOINT`` (the local stand-in) when set."""
    endpoint = os.environ.get("ZEN_COMPUTE_ENDPOINT")
    if not endpoint:
        return compute_v1.RegionInstanceGroupManagerResizeRequestsClient()
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.compute_v1.services.region_instance_group_manager_resize_requests.transports.rest import (
        RegionInstanceGroupManagerResizeRequestsRestTransport,
    )

    return compute_v1.RegionInstanceGroupManagerResizeRequestsClient(
        transport=RegionInstanceGroupManagerResizeRequestsRestTransport(
            host=endpoint.removeprefix("http://"), credentials=AnonymousCredentials(), url_scheme="http"))


def _named_quota(errors: Sequence[compute_v1.Errors]) -> str | None:
    """The GPU quotas a failed request's QUOTA_EXCEEDED errors name (``zen.core.quotas.named``), joined; None when
    one names none the tick reads (a CPU quota, say): its block then runs its course."""
    names = [named(e.message) for e in errors if error_kind(e.code) is ErrorKind.QUOTA]
    return ",".join(sorted({n for n in names if n})) if names and all(names) else None


def pending_name(mig: str, request: str, index: int) -> str:
    """The name a pending request's ``index``-th VM goes by until the request is granted."""
    return f"{mig}{PENDING_SEP}{request}{PENDING_SEP}{index}"


def request_of(name: str) -> str | None:
    """The resize request a pending VM's name stands for; None: a real instance's name."""
    parts = name.split(PENDING_SEP)
    return parts[1] if len(parts) == 3 else None


class FlexStartMig(MigManager):
    def __init__(self, project: str, region: str, name: str, migs: compute_v1.RegionInstanceGroupManagersClient,
                 operations: compute_v1.RegionOperationsClient,
                 requests: compute_v1.RegionInstanceGroupManagerResizeRequestsClient, run_s: int,
                 call_bound_s: float | None = None, now: Callable[[], datetime] = utc_now):
        super().__init__(project, region, name, migs, operations, call_bound_s)
        self._requests = requests
        self.run_s = run_s  # each request's requested run duration: its VMs are deleted after it
        self._now = now  # Compute's clock, to which requests' creation timestamps belong

    def pending(self) -> dict[str, int]:
        """The requests not granted yet (CREATING or ACCEPTED): name -> VMs it asks for, oldest first."""
        return self._listed(report=False)[0]

    def _listed(self, report: bool) -> tuple[dict[str, int], list[MigError], bool]:
        """``pending``, and with ``report`` the FAILED requests this read deletes, as creation errors: each once, so
        the planner strikes the pool (a failed request is not retried by Compute: asked again as it was, it would
        fail again, pass after pass, with nothing said). Every FAILED one in one read (at most the VMs one pass
        asked for, a request each): reported a few a read, those left struck the pool again once its block was
        over, though nothing had been asked since. Without ``report`` (a target size read) a FAILED request is left
        for the next read to report. Last, whether Compute listed any request at all."""
        pages = self._call(self._requests.list)
        with self._translated("listing resize requests"):  # later pages are fetched while iterating
            items = sorted(pages, key=lambda r: (r.creation_timestamp, r.name))
        over = [r for r in items if self._over(r)]
        ended = ([r for r in over if r.state == "FAILED"] if report else []) + [
            r for r in over if r.state != "FAILED"][:FORGET_PER_READ]
        failed = [self._failure(r) for r in self._forget(ended) if r.state == "FAILED"]
        return {r.name: r.resize_by for r in items if r.state in _PENDING}, failed, bool(items)

    def _failure(self, request: compute_v1.InstanceGroupManagerResizeRequest) -> MigError:
        errors = list(request.status.error.errors) if request.status and request.status.error else []
        code = errors[0].code if errors else ""
        said = "; ".join(f"{e.code}: {e.message}" if e.message else e.code for e in errors) or "no reason given"
        return MigError(self.region, error_kind(code), self._now(), pending_name(self.name, request.name, 0),
                        detail=f"flex-start resize request {request.name} failed ({said})",
                        quota=_named_quota(errors))

    def _over(self, request: compute_v1.InstanceGroupManagerResizeRequest) -> bool:
        """Whether an ended request can go: failed or cancelled, or granted and past its run duration."""
        if request.state in _ENDED:
            return True
        if request.state != "SUCCEEDED" or not request.creation_timestamp:
            return False
        run_s = (request.requested_run_duration.seconds if request.requested_run_duration else 0) or self.run_s
        try:
            created = datetime.fromisoformat(request.creation_timestamp)
        except ValueError:
            return False  # kept: a timestamp not understood says nothing about its VMs
        if created.tzinfo is None:
            created = created.replace(tzinfo=timezone.utc)
        return self._now() >= created + timedelta(seconds=run_s)

    def _forget(self, requests: list[compute_v1.InstanceGroupManagerResizeRequest]
                ) -> list[compute_v1.InstanceGroupManagerResizeRequest]:
        """Delete ``requests`` in turn until one fails (the next read tries again); those deleted."""
        for done, request in enumerate(requests):
            try:
                self._write(self._requests.delete_unary, resize_request=request.name)
            except MigApiError as exc:
                log.warning("could not delete an ended resize request", extra={
                    "mig": self.name, "region": self.region, "resize_request": request.name, "error": str(exc)})
                return requests[:done]
        return requests

    def _pending_instances(self, pending: dict[str, int]) -> list[MigInstance]:
        return [MigInstance(pending_name(self.name, request, i), None, "CREATING", "", None)
                for request, count in pending.items() for i in range(count)]

    def target_size(self) -> int:
        """The MIG's target size plus the VMs its pending requests ask for (what the limits count)."""
        return self._state(report=False).target_size

    def read(self, since: datetime | None = None, summary: MigSummary | None = None) -> MigState:
        """As ``MigManager.read``, plus the pending requests' VMs and the failed ones' errors (``_listed``). With a
        ``summary`` of an empty, stable MIG, one call: its requests listed, none at all (a granted one is listed
        until its run is over, a queued one while it waits): nothing to read (it was three calls a pass)."""
        return self._state(report=True, since=since, summary=summary)

    def _state(self, report: bool, since: datetime | None = None, summary: MigSummary | None = None) -> MigState:
        # The requests first: one granted while the MIG is read is then in the target size read after it
        # (counted twice at worst, never nowhere, which would ask for its VMs again).
        pending, failed, listed = self._listed(report)
        if not listed and summary is not None and summary.target_size == 0 and summary.stable:
            return MigState(0, [], [])
        target = super().target_size()
        instances = self.instances()
        settled = len(instances) == target and all(i.current_action == "NONE" for i in instances)
        errors = ([] if settled else self.errors(since)) + failed
        # Should Compute list a queued request's instances itself (CREATING, no VM yet), they stand for it: only
        # the VMs it does not list are added. Those are the ones beyond the target size, which counts granted
        # VMs only: a granted request's VMs being created are listed so too, and stand for no queued one.
        # (Were queued ones counted in the target too, they would be counted twice: never beyond the limits.)
        creating = sum(1 for i in instances if i.current_action == "CREATING" and not i.status and not i.creation_error)
        beyond = len([i for i in instances if i.current_action != "DELETING"]) - target
        unlisted = self._pending_instances(pending)[max(0, min(creating, beyond)):]
        return MigState(target + len(unlisted), instances + unlisted, errors)

    def resize(self, size: int, together: Sequence[int] = ()) -> None:
        """Ask for ``size`` less the VMs there are and asked for, in resize requests each granted all at once:
        one per unit of ``together`` that fits (a gang's VMs: a gang waits for no other gang's grant), then
        one per VM of the rest (one-node jobs' VMs: a job waits for no other's grant; one insert call each).
        A request refused after others were made raises ``MigUnconfirmed``: the resize was carried out in part; one
        rate limited raises ``MigRateLimited`` naming the VMs the requests made add (``added``): the rest is asked
        again next pass, and the pool is not struck (it was, as a resize refused, though nothing was wrong with it)."""
        more = size - self.target_size()
        if more <= 0:
            return
        added = 0
        for made, count in enumerate(resize_requests(together, more)):
            request = compute_v1.InstanceGroupManagerResizeRequest(
                name=f"zen-{uuid.uuid4().hex[:12]}", resize_by=count,
                requested_run_duration=compute_v1.Duration(seconds=self.run_s))
            try:
                self._write(self._requests.insert_unary, instance_group_manager_resize_request_resource=request)
            except MigRateLimited as exc:
                exc.added = added
                raise
            except MigApiError as exc:
                if not made or isinstance(exc, MigUnconfirmed):
                    raise
                raise MigUnconfirmed(f"{exc} (after {made} other resize request(s) were made)") from exc
            added += count

    def delete_instances(self, names: list[str], zones: dict[str, str | None]) -> dict[str, str]:
        """Real instances are deleted; a pending one cancels its whole request (once per request). Each request
        on its own: Compute refuses to cancel one no longer queued (granted since the read: the MIG then lists
        its VMs, which the next pass sees as any other; or given up, FAILED: ``_became`` says which), and that
        stops none of the others (the loop gave up at
        it, leaving later requests queued for a grant nobody wanted); such a request's pending VMs are returned,
        with why, as not deleted (counted deleted, the pass said it cancelled a request Compute had granted, its
        VMs booting, billed); any other failure is raised once everything was tried, naming what it left
        (``MigApiError.undeleted``, the refused requests' VMs among them)."""
        failed: list[MigApiError] = []
        left: set[str] = set()
        kept: dict[str, str] = {}
        real = [n for n in names if request_of(n) is None]
        try:
            super().delete_instances(real, zones)
        except MigApiError as exc:
            failed.append(exc)
            left.update(real if exc.undeleted is None else exc.undeleted)
        for request in dict.fromkeys(r for n in names if (r := request_of(n)) is not None):
            try:
                self._write(self._requests.cancel_unary, resize_request=request)
            except MigApiError as exc:
                if isinstance(exc.__cause__, gexc.BadRequest):  # not queued any more: nothing to cancel
                    log.info("resize request %s of %s not cancelled: %s", request, self.name, exc)
                    why = self._became(request)
                    kept.update({n: f"its flex-start resize request {request} was not cancelled: no longer queued "
                                 f"({why}): {exc}" for n in names if request_of(n) == request})
                    continue
                failed.append(exc)
                left.update(n for n in names if request_of(n) == request)
        raise_first(failed, left | set(kept))
        return kept

    def _became(self, request: str) -> str:
        """What became of ``request`` since it was read queued, as Compute lists it now: granted (its VMs seen as any
        other), or given up (FAILED: no VM was made; the next read reports it). Said "granted" whatever its state,
        a request Compute had failed was told of as VMs booting, billed, that never were."""
        try:
            state = self._call(self._requests.get, resize_request=request).state
        except MigApiError as exc:
            return f"its state could not be read: {exc}"
        if state == "SUCCEEDED":
            return "granted since it was read, its VMs are seen as any other"
        if state in _ENDED:
            return f"{state} since it was read: no VM was made"
        return f"{state or 'its state not given'} since it was read"


_ADAPTS: type[MigPort] = FlexStartMig  # the type checker holds the adapter to its port
