"""The Compute REST surface (JSON over HTTP/1.1) on the stdlib ``ThreadingHTTPServer``.

The regionInstanceGroupManagers and regionOperations paths the official ``google-cloud-compute`` REST
transport sends, with Google's JSON error bodies (so the client raises ``NotFound``, ``Forbidden``,
``ServiceUnavailable``, ...), and the VM identity tokens and their certificates
(``zen_dev.local.compute.issuer``). Other methods answer 501, other paths 404.
The paths: docs/reference/simulator.md#what-the-compute-stand-in-simulates
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from zen_dev.local.compute import resources as r
from zen_dev.local.compute import maintenance, notice, views
from zen_dev.local.compute.faults import Outages, RateLimiter
from zen_dev.local.compute.issuer import TokenIssuer
from zen_dev.local.compute.world import World

log = logging.getLogger("zen_dev.local.compute")

_P = r"^/compute/v1/projects/(?P<project>[^/]+)"
_R = _P + r"/regions/(?P<region>[^/]+)"
_M = _R + r"/instanceGroupManagers/(?P<mig>[^/]+)"
_ROUTES = [
    ("GET", _P + r"$", "projects.get"),
    ("GET", _R + r"$", "regions.get"),
    ("GET", _R + r"/instanceGroupManagers$", "list"),
    ("GET", _P + r"/aggregated/instanceGroupManagers$", "aggregatedList"),
    ("GET", _M + r"$", "get"),
    ("POST", _M + r"/resize$", "resize"),
    ("POST", _M + r"/deleteInstances$", "deleteInstances"),
    ("POST", _M + r"/listManagedInstances$", "listManagedInstances"),
    ("GET", _M + r"/listErrors$", "listErrors"),
    ("GET", _M + r"/resizeRequests$", "resizeRequests.list"),
    ("POST", _M + r"/resizeRequests$", "resizeRequests.insert"),
    ("GET", _M + r"/resizeRequests/(?P<rr>[^/]+)$", "resizeRequests.get"),
    ("POST", _M + r"/resizeRequests/(?P<rr>[^/]+)/cancel$", "resizeRequests.cancel"),
    ("DELETE", _M + r"/resizeRequests/(?P<rr>[^/]+)$", "resizeRequests.delete"),
    ("GET", _P + r"/global/instanceTemplates/(?P<template>[^/]+)$", "instanceTemplates.get"),
    ("GET", _R + r"/operations$", "operations.list"),
    ("GET", _R + r"/operations/(?P<op>[^/]+)$", "operations.get"),
    ("POST", _R + r"/operations/(?P<op>[^/]+)/wait$", "operations.wait"),
    # GCE's way to make a spot VM go through a preemption now (used by the demo and tests).
    ("POST", _P + r"/zones/(?P<zone>[^/]+)/instances/(?P<instance>[^/]+)/simulateMaintenanceEvent$",
     "simulateMaintenanceEvent"),
]
_UNIMPLEMENTED = [
    ("POST", _R + r"/instanceGroupManagers$"),
    ("DELETE", _M + r"$"),
    ("PATCH", _M + r"$"),
    ("POST", _M + r"/(abandonInstances|applyUpdatesToInstances|createInstances|deletePerInstanceConfigs"
     r"|listPerInstanceConfigs|patchPerInstanceConfigs|recreateInstances|resumeInstances"
     r"|setInstanceTemplate|setTargetPools|startInstances|stopInstances|suspendInstances"
     r"|updatePerInstanceConfigs)$"),
    ("DELETE", _R + r"/operations/[^/]+$"),
]
_COMPILED = [(m, re.compile(p), name) for m, p, name in _ROUTES]
_COMPILED_501 = [(m, re.compile(p)) for m, p in _UNIMPLEMENTED]
MAX_WAIT_REAL_S = 30.0
CERTS_PATH = "/oauth2/v1/certs"
# A person's or a program's ID token, as Google's sign-in gives one (zen.adapters.submitters): the local
# stack's `zen` asks here, for $ZEN_AS or $USER, what it asks gcloud for against a deployed Zen.
PEOPLE_PATH = "/zen-local/identity"
_IDENTITY = re.compile(r"^/zen-local/vms/(?P<vm>[^/]+)/computeMetadata/v1/instance/service-accounts/default/identity$")


class ComputeApi:
    """Routes one request to the world; returns ``(status, json_body)``. No HTTP plumbing."""

    def __init__(self, world: World, rate_limiter: RateLimiter, outages: Outages | None = None):
        self.world = world
        self.rate_limiter = rate_limiter
        self.outages = outages if outages is not None else Outages([])
        self._issuer: TokenIssuer | None = None  # made at the first use (a key takes a moment)
        self._issuer_lock = threading.Lock()

    @property
    def issuer(self) -> TokenIssuer:
        with self._issuer_lock:
            if self._issuer is None:
                self._issuer = TokenIssuer()
            return self._issuer

    def proof(self, path: str, query: dict[str, str]) -> tuple[int, str, dict[str, str]] | None:
        """The certificates, a running VM's identity token or a person's; None for any other path."""
        if path == CERTS_PATH:
            return 200, json.dumps(self.issuer.certs()), {"Content-Type": "application/json; charset=UTF-8",
                                                          "Cache-Control": "public, max-age=3600"}
        if path == PEOPLE_PATH:
            if not query.get("email") or not query.get("audience"):
                return 400, "email and audience parameters required", {}
            return 200, self.issuer.user_token(email=query["email"], audience=query["audience"]), {
                "Content-Type": "application/text"}
        if (preempted := notice.answer(self.world, path, query)) is not None:
            return preempted  # instance/preempted and instance/maintenance-event, as the metadata server serves them
        match = _IDENTITY.match(path)
        if match is None:
            return None
        with self.world.lock:
            inst = self.world.running(match["vm"])
        if inst is None:
            return 404, f"no running VM {match['vm']}", {"Metadata-Flavor": "Google"}
        if not query.get("audience"):
            return 400, "non-empty audience parameter required", {"Metadata-Flavor": "Google"}
        token = self.issuer.token(vm=inst.name, zone=inst.zone, project=self.world.project,
                                  audience=query["audience"], instance_id=inst.vm_id or 0)
        return 200, token, {"Metadata-Flavor": "Google", "Content-Type": "application/text"}

    def handle(self, method: str, path: str, query: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            for verb, pattern, name in _COMPILED:
                match = pattern.match(path)
                if match and verb == method:
                    self.outages.check(name, match.groupdict().get("region"), self.world.clock.now())
                    self.rate_limiter.check(name, self.world.clock.now())
                    return 200, self._call(name, match.groupdict(), query, body)
            for verb, pattern in _COMPILED_501:
                if verb == method and pattern.match(path):
                    raise r.ApiError(501, "notImplemented", f"{method} {path} is not implemented by the Zen compute stand-in")
            raise r.ApiError(404, "notFound", f"The requested URL {path} was not found on this server.")
        except r.ApiError as exc:
            return exc.code, exc.body()
        except Exception:  # a bug here must still answer, as GCE's backendError would
            log.exception("compute stand-in: %s %s failed", method, path)
            return 500, r.ApiError(500, "backendError", "Internal error in the compute stand-in").body()

    def _call(self, name: str, p: dict[str, str], query: dict[str, str], body: bytes) -> dict[str, Any]:
        world = self.world
        if name == "operations.wait":
            return self._wait(p["project"], p["region"], p["op"])
        with world.lock:
            world.advance()
            if name == "list":
                world.check_project(p["project"])
                return views.mig_list(world, p["region"], query)
            if name == "aggregatedList":
                world.check_project(p["project"])
                return views.mig_aggregated_list(world)
            if name == "projects.get":  # the project-wide quotas (GPUS_ALL_REGIONS)
                world.check_project(p["project"])
                return {"kind": "compute#project", "name": p["project"], "quotas": world.project_quotas()}
            if name == "regions.get":  # the region's quotas (its GPU families', by provisioning model)
                world.check_project(p["project"])
                return {"kind": "compute#region", "name": p["region"], "status": "UP",
                        "quotas": world.region_quotas(p["region"])}
            if name == "operations.list":
                world.check_project(p["project"])
                return views.operation_list(world, p["region"], query)
            if name == "operations.get":
                return views.operation_resource(world, world.find_operation(p["project"], p["region"], p["op"]))
            if name == "simulateMaintenanceEvent":
                return self._simulate_maintenance_event(p["project"], p["zone"], p["instance"])
            if name == "instanceTemplates.get":
                return views.instance_template(world, world.find_template(p["project"], p["template"]))
            mig = world.find_mig(p["project"], p["region"], p["mig"])
            if name.startswith("resizeRequests."):
                return self._resize_requests(name, mig, p.get("rr"), query, body)
            if name == "get":
                return views.mig_resource(world, mig)
            if name == "listManagedInstances":
                return r.page(views.managed_instances(world, mig), query, "managedInstances")
            if name == "listErrors":
                return r.page(list(mig.errors), query, "items")
            if name == "resize":
                op = world.resize(mig, _int_param(query, "size"), query.get("requestId"))
                return views.operation_resource(world, op)
            if name == "deleteInstances":
                payload = _json_object(body)
                refs = payload.get("instances") or []
                if not isinstance(refs, list) or not all(isinstance(x, str) for x in refs):
                    raise r.invalid("Invalid value for field 'instances': must be a list of instance URLs or names.")
                if len(refs) > r.MAX_DELETE_INSTANCES:  # refused whole, as Compute refuses it
                    raise r.invalid(f"Invalid value for field 'instances': {len(refs)} instances. At most "
                                    f"{r.MAX_DELETE_INSTANCES} can be deleted per request.")
                skip = bool(payload.get("skipInstancesOnValidationError", False))
                op = world.delete_instances(mig, refs, skip, query.get("requestId"))
                return views.operation_resource(world, op)
        raise r.ApiError(404, "notFound", f"unknown method {name}")  # pragma: no cover

    def _resize_requests(self, name: str, mig: Any, request: str | None, query: dict[str, str],
                         body: bytes) -> dict[str, Any]:
        requests, world = self.world.resize_requests, self.world
        if name == "resizeRequests.list":
            return requests.listing(mig, query)
        if name == "resizeRequests.get":
            return requests.resource(requests.find(mig, request or ""))
        if name == "resizeRequests.insert":
            op = requests.insert(mig, _json_object(body), query.get("requestId"))
        elif name == "resizeRequests.cancel":
            op = requests.cancel(mig, request or "", query.get("requestId"))
        else:
            op = requests.delete(mig, request or "", query.get("requestId"))
        return views.operation_resource(world, op)

    def _simulate_maintenance_event(self, project: str, zone: str, name: str) -> dict[str, Any]:
        """Preempt the named spot VM, as GCE does for this call; a standard or flex-start VM, which has GPUs and
        cannot live-migrate, gets the host maintenance notice and is terminated at its end (maintenance.py)."""
        world = self.world
        world.check_project(project)
        for mig in world.migs.values():
            instance = mig.instances.get(name)
            if instance is not None and not instance.removed:
                if not (world.preempt(instance, "preempted (simulateMaintenanceEvent)") if mig.preemptible
                        else maintenance.announce(world, instance)):
                    raise r.ApiError(400, "resourceNotReady", f"The resource '{name}' is not running")
                link = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
                return {"kind": "compute#operation", "id": str(instance.id if hasattr(instance, "id") else 0),
                        "name": f"operation-maintenance-{name}", "zone": link, "operationType": "simulateMaintenanceEvent",
                        "targetLink": f"{link}/instances/{name}", "status": "DONE", "progress": 100,
                        "selfLink": f"{link}/operations/operation-maintenance-{name}"}
        raise r.ApiError(404, "notFound", f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found")

    def _wait(self, project: str, region: str, op_name: str) -> dict[str, Any]:
        """Like GCE: return when the operation is DONE or after a while (it may still run)."""
        world = self.world
        with world.lock:
            world.advance()
            op = world.find_operation(project, region, op_name)
            remaining = max(0.0, op.done_t - world.now)
        real = getattr(world.clock, "real_seconds", lambda s: None)(min(remaining, 120.0) + 1.0)
        deadline = time.monotonic() + min(real or 0.0, MAX_WAIT_REAL_S)
        while True:
            with world.lock:
                world.advance()
                if world.now >= op.done_t or time.monotonic() >= deadline:
                    return views.operation_resource(world, op)
            time.sleep(0.02)


def _int_param(query: dict[str, str], name: str) -> int:
    if name not in query:
        raise r.ApiError(400, "required", f"Required field '{name}' not specified")
    try:
        return int(query[name])
    except ValueError:
        raise r.invalid(f"Invalid value for field '{name}': '{query[name]}'. Must be an integer.") from None


def _json_object(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise r.ApiError(400, "parseError", f"Parse Error: {exc}") from None
    if not isinstance(payload, dict):
        raise r.ApiError(400, "parseError", "Parse Error: the request body must be a JSON object")
    return payload


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: a kept-alive connection's reply (headers and body written apart) otherwise waits
    # for the client's delayed ACK, ~40 ms per call, as Nagle's algorithm holds the second write.
    disable_nagle_algorithm = True
    server_version = "ZenComputeStandIn/1.0"
    timeout = 60  # idle keep-alive connections end after this

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        proof = self.server.api.proof(parts.path, query) if self.command == "GET" else None  # type: ignore[attr-defined]
        if proof is not None:
            status, text, headers = proof
            data = text.encode()
        else:
            status, payload = self.server.api.handle(self.command, parts.path, query, body)  # type: ignore[attr-defined]
            data, headers = json.dumps(payload).encode(), {"Content-Type": "application/json; charset=UTF-8"}
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _dispatch

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)


class ComputeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], api: ComputeApi):
        super().__init__(address, _Handler)
        self.api = api
