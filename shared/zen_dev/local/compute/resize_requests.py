"""Flex-start resize requests (``regionInstanceGroupManagerResizeRequests``) in the simulated cloud.

As Compute answers them: ``insert`` queues a request for ``resizeBy`` VMs (state ACCEPTED); it is
granted all at once, no sooner than ``grant_delay_s`` after it was made, at the first moment the
free capacity of its MIG's zones (the scenario's capacity model, as for every VM) holds all of its
VMs: its MIG's target size grows by ``resizeBy``, its VMs are created and boot as any other, and the
request is SUCCEEDED. Until then it is looked at again every ``retry_interval_s`` of the scenario.
Its VMs are deleted (the target size shrinking) once its ``requestedRunDuration`` has passed, as
flex-start VMs are. ``cancel`` works only while it is ACCEPTED (CANCELLED); ``delete`` only once it is
no longer active; ``fail`` gives one up as Compute may (FAILED, its reason in ``status.error``). Callers
hold the world's lock and have advanced it (``zen_dev.local.compute.server``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from zen_dev.local.compute import resources as r
from zen_dev.local.compute.model import Instance, Mig, Operation

_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")  # RFC 1035, as Compute checks resource names
MAX_RUN_S = 7 * 86400  # flex-start VMs run at most 7 days


@dataclass
class ResizeRequest:
    name: str
    id: int
    mig: Mig
    resize_by: int
    run_s: int | None
    created_t: float
    description: str = ""
    state: str = "ACCEPTED"
    instances: list[Instance] = field(default_factory=list)
    error: tuple[str, str] | None = None  # FAILED: (code, message), listed as ``status.error``


class ResizeRequests:
    def __init__(self, world: Any, grant_delay_s: float = 30.0):
        self.world = world  # zen_dev.local.compute.world.World, which holds this
        self.grant_delay_s = grant_delay_s  # the least time from a request to its grant
        # From a grant to its VMs' creation: meanwhile they are listed CREATING with no instanceStatus, as
        # Compute lists an instance whose VM does not exist yet (0: created at once).
        self.create_delay_s = 0.0
        self._by_mig: dict[tuple[str, str], dict[str, ResizeRequest]] = {}

    def of(self, mig: Mig) -> list[ResizeRequest]:
        """The MIG's requests, oldest first."""
        return list(self._by_mig.get((mig.spec.region, mig.name), {}).values())

    def find(self, mig: Mig, name: str) -> ResizeRequest:
        found = self._by_mig.get((mig.spec.region, mig.name), {}).get(name)
        if found is None:
            raise r.not_found(f"{r.mig_path(mig.project, mig.spec.region, mig.name)}/resizeRequests/{name}")
        return found

    def pending(self, mig: Mig) -> int:
        """VMs the MIG's queued requests ask for."""
        return sum(q.resize_by for q in self.of(mig) if q.state == "ACCEPTED")

    # ----- the API's calls ------------------------------------------------------------------
    def insert(self, mig: Mig, body: dict[str, Any], request_id: str | None) -> Operation:
        world = self.world
        if (done := self._replayed(request_id)) is not None:
            return done
        name, resize_by = body.get("name"), body.get("resizeBy")
        if not isinstance(name, str) or not _NAME.match(name):
            raise r.invalid(f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex "
                            "'[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'")
        if not isinstance(resize_by, int) or isinstance(resize_by, bool) or not 1 <= resize_by <= 1000:
            raise r.invalid(f"Invalid value for field 'resource.resizeBy': '{resize_by}'. Must be between 1 and 1000.")
        run_s = _duration_s(body.get("requestedRunDuration"))
        requests = self._by_mig.setdefault((mig.spec.region, mig.name), {})
        if name in requests:
            raise r.ApiError(409, "alreadyExists", f"The resource '{r.mig_path(mig.project, mig.spec.region, mig.name)}"
                             f"/resizeRequests/{name}' already exists")
        request = ResizeRequest(name, next(world._ids), mig, resize_by, run_s, world.now,
                                str(body.get("description") or ""))
        requests[name] = request
        world._schedule(world.now + self.grant_delay_s, self._try_grant, request)
        return world._operation(mig, "compute.regionInstanceGroupManagerResizeRequests.insert", request_id)

    def _replayed(self, request_id: str | None) -> Operation | None:
        """The operation a call with this requestId already made (Compute carries a retried call out once)."""
        return self.world._requests.get(request_id) if request_id else None

    def cancel(self, mig: Mig, name: str, request_id: str | None) -> Operation:
        world = self.world
        if (done := self._replayed(request_id)) is not None:
            return done
        request = self.find(mig, name)
        if request.state != "ACCEPTED":
            raise r.ApiError(400, "resourceNotReady", f"The resize request '{name}' is {request.state}: only an "
                             "ACCEPTED resize request can be cancelled.")
        request.state = "CANCELLED"
        return world._operation(mig, "compute.regionInstanceGroupManagerResizeRequests.cancel", request_id)

    def delete(self, mig: Mig, name: str, request_id: str | None) -> Operation:
        world = self.world
        if (done := self._replayed(request_id)) is not None:
            return done
        request = self.find(mig, name)
        if request.state == "ACCEPTED":
            raise r.ApiError(400, "resourceInUseByAnotherResource", f"The resize request '{name}' is still active: "
                             "cancel it first.")
        del self._by_mig[(mig.spec.region, mig.name)][name]
        return world._operation(mig, "compute.regionInstanceGroupManagerResizeRequests.delete", request_id)

    def fail(self, request: ResizeRequest, code: str, message: str) -> None:
        """Compute gives a queued request up (FAILED, for good: it is not retried), saying why in ``status.error``."""
        if request.state == "ACCEPTED":
            request.state, request.error = "FAILED", (code, message)

    # ----- its life -------------------------------------------------------------------------
    def _try_grant(self, request: ResizeRequest) -> None:
        if request.state != "ACCEPTED":
            return
        world, mig = self.world, request.mig
        # All at once, in one zone (a flex-start MIG's target shape is ANY_SINGLE_ZONE), or not yet.
        zones = [z for z in mig.spec.zones if world.free(z, mig.spec.machine_type) >= request.resize_by]
        if not zones:
            world._schedule(world.now + world._timings.retry_interval_s, self._try_grant, request)
            return
        request.state = "SUCCEEDED"
        mig.target_size += request.resize_by
        request.instances = [world._new_instance(mig, zones[0], self.create_delay_s) for _ in range(request.resize_by)]
        if request.run_s is not None:
            world._schedule(world.now + request.run_s, self._expire, request)

    def _expire(self, request: ResizeRequest) -> None:
        """Its run duration is over: its VMs still there are deleted (terminated, not preempted)."""
        for inst in request.instances:
            if not inst.removed and not inst.doomed:
                inst.mig.target_size -= 1
                self.world._delete(inst)

    def resource(self, request: ResizeRequest) -> dict[str, Any]:
        mig, world = request.mig, self.world
        link = f"{r.mig_url(mig.project, mig.spec.region, mig.name)}/resizeRequests/{request.name}"
        out: dict[str, Any] = {
            "kind": "compute#instanceGroupManagerResizeRequest", "id": str(request.id),
            "creationTimestamp": world.ts.at(request.created_t), "name": request.name,
            "region": r.region_url(mig.project, mig.spec.region), "resizeBy": request.resize_by,
            "state": request.state, "status": {}, "selfLink": link,
            "selfLinkWithId": f"{r.mig_url(mig.project, mig.spec.region, mig.name)}/resizeRequests/{request.id}",
        }
        if request.error is not None:
            out["status"] = {"error": {"errors": [{"code": request.error[0], "message": request.error[1]}]}}
        if request.description:
            out["description"] = request.description
        if request.run_s is not None:
            out["requestedRunDuration"] = {"seconds": str(request.run_s)}
        return out

    def listing(self, mig: Mig, query: dict[str, str]) -> dict[str, Any]:
        listed = r.page([self.resource(q) for q in self.of(mig)], query, "items")
        return {"kind": "compute#regionInstanceGroupManagerResizeRequestList",
                "selfLink": f"{r.mig_url(mig.project, mig.spec.region, mig.name)}/resizeRequests", **listed}


def _duration_s(value: Any) -> int | None:
    if value is None:
        return None
    seconds = value.get("seconds") if isinstance(value, dict) else None
    try:
        run_s = int(seconds)
    except (TypeError, ValueError):
        raise r.invalid(f"Invalid value for field 'resource.requestedRunDuration': '{value}'.") from None
    if not 600 <= run_s <= MAX_RUN_S:
        raise r.invalid(f"Invalid value for field 'resource.requestedRunDuration.seconds': '{run_s}'. Must be "
                        f"between 600 and {MAX_RUN_S}.")
    return run_s
