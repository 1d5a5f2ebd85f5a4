"""Official ``google-cloud-compute`` clients pointed at a stand-in (REST, anonymous credentials).

One pitfall this handles: ``RegionInstanceGroupManagersClient.resize(...)`` returns an
``ExtendedOperation`` that polls through ``transport._region_operations_client``, which the
library builds lazily with the default host (``compute.googleapis.com``), not the transport's.
The stand-in's operations are DONE at once by default, so ``.result()`` never polls; when they
are not (``api.operation_delay_s > 0``), polling must reach the stand-in, so
:func:`compute_clients` installs its own ``RegionOperationsClient`` there.
"""

from __future__ import annotations

from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1
from google.cloud.compute_v1.services.region_instance_group_managers.transports.rest import (
    RegionInstanceGroupManagersRestTransport,
)
from google.cloud.compute_v1.services.region_operations.transports.rest import RegionOperationsRestTransport


def compute_clients(
    endpoint: str,
) -> tuple[compute_v1.RegionInstanceGroupManagersClient, compute_v1.RegionOperationsClient]:
    """``(migs, operations)`` clients for ``endpoint`` (``HOST:PORT``, plain HTTP)."""
    credentials = AnonymousCredentials()
    migs_transport = RegionInstanceGroupManagersRestTransport(
        host=endpoint, credentials=credentials, url_scheme="http"
    )
    ops_transport = RegionOperationsRestTransport(host=endpoint, credentials=credentials, url_scheme="http")
    operations = compute_v1.RegionOperationsClient(transport=ops_transport)
    services = getattr(migs_transport, "_extended_operations_services", None)
    if isinstance(services, dict):
        services["region_operations"] = operations
    return compute_v1.RegionInstanceGroupManagersClient(transport=migs_transport), operations
