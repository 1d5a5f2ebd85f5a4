"""QuotaReader: the GPU quotas Compute reports, through ``google-cloud-compute`` (``RegionsClient.get``
for a region's quotas, ``ProjectsClient.get`` for the project-wide ``GPUS_ALL_REGIONS``).

Each answer is kept ``ttl_s`` (a minute) for ``zen clusters`` / ``zen explain``, which ask once per region;
the scale tick reads afresh, once per tick for the regions its clusters use, never a submission's pass.
A read that fails is told to the caller (``QuotaUnread``); a region whose quotas are unknown is held back
by none. ``ZEN_COMPUTE_ENDPOINT`` (``HOST:PORT``) points the clients at the local Compute stand-in, which
serves the same quotas (docs/reference/simulator.md). What the quotas mean: ``zen.core.quotas``.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from zen.core.quotas import Quota
from zen.scaling.port import QuotaPort

CALL_BOUND_S = 10.0
TTL_S = 60.0


class QuotaUnread(RuntimeError):
    """Compute's quotas could not be read (no credentials, no permission, unreachable)."""


def quota_clients_from_env() -> tuple[Any, Any]:
    from google.cloud import compute_v1

    endpoint = os.environ.get("ZEN_COMPUTE_ENDPOINT")
    if not endpoint:
        return compute_v1.RegionsClient(), compute_v1.ProjectsClient()
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.compute_v1.services.projects.transports.rest import ProjectsRestTransport
    from google.cloud.compute_v1.services.regions.transports.rest import RegionsRestTransport

    host, credentials = endpoint.removeprefix("http://"), AnonymousCredentials()
    return (compute_v1.RegionsClient(transport=RegionsRestTransport(host=host, credentials=credentials,
                                                                     url_scheme="http")),
            compute_v1.ProjectsClient(transport=ProjectsRestTransport(host=host, credentials=credentials,
                                                                       url_scheme="http")))


def _quotas(resource: Any) -> dict[str, Quota]:
    return {q.metric: Quota(q.metric, float(q.limit), float(q.usage)) for q in resource.quotas}


class QuotaReader:
    def __init__(self, project: str, clients: tuple[Any, Any] | None = None, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic, call_bound_s: float = CALL_BOUND_S):
        self.project = project
        self._clients = clients  # built at the first read (quota_clients_from_env)
        self._ttl_s, self._clock, self._bound_s = ttl_s, clock, call_bound_s
        self._kept: dict[str, tuple[float, dict[str, Quota]]] = {}  # region ("" : the project) -> (read at, quotas)
        self._lock = threading.Lock()
        self.api_calls = 0

    def region(self, region: str, fresh: bool = False) -> dict[str, Quota]:
        """``region``'s quotas by metric (``QuotaUnread`` when they cannot be read); ``fresh``: read now, not the
        answer kept (the tick's: the planner counts the VMs a pool lists now against it, ``zen.scaling.quotas``)."""
        return self._read(region, lambda regions, _: regions.get(project=self.project, region=region,
                                                                  timeout=self._bound_s), fresh)

    def project_wide(self, fresh: bool = False) -> dict[str, Quota]:
        """The project's quotas by metric, ``GPUS_ALL_REGIONS`` among them."""
        return self._read("", lambda _, projects: projects.get(project=self.project, timeout=self._bound_s), fresh)

    def _read(self, key: str, call: Callable[[Any, Any], Any], fresh: bool = False) -> dict[str, Quota]:
        with self._lock:
            kept = self._kept.get(key)
            if not fresh and kept is not None and self._clock() - kept[0] < self._ttl_s:
                return kept[1]
        try:
            if self._clients is None:
                self._clients = quota_clients_from_env()
            self.api_calls += 1
            found = _quotas(call(*self._clients))
        except Exception as exc:  # noqa: BLE001 - credentials, permission, transport: told in one line
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise QuotaUnread(f"could not read the GPU quotas of {key or 'project ' + self.project}: "
                              f"{type(exc).__name__}: {text}") from None
        with self._lock:
            self._kept[key] = (self._clock(), found)
        return found


_ADAPTS: type[QuotaPort] = QuotaReader  # the type checker holds the adapter to its port
