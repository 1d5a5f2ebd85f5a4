"""JSON shapes of the Compute API (camelCase, as the REST API and the official client use them).

Links use the real API root (``https://www.googleapis.com/compute/v1/...``) as GCE does: clients
treat them as identifiers (instance name = last segment, zone = the segment after ``zones/``),
not as addresses to call.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

API_ROOT = "https://www.googleapis.com/compute/v1"
MAX_MIG_SIZE = 2000  # a regional MIG "can contain up to 2000 instances" (regionInstanceGroupManagers.insert)
MAX_DELETE_INSTANCES = 1000  # deleteInstances: "a maximum of 1000 instances with this method per request"


class ApiError(Exception):
    """An error answer: HTTP ``code``, Google ``reason`` (notFound, invalid, ...) and message."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def body(self) -> dict[str, Any]:
        domain = "usageLimits" if self.reason == "rateLimitExceeded" else "global"
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "errors": [{"message": self.message, "domain": domain, "reason": self.reason}],
            }
        }


def not_found(what: str) -> ApiError:
    return ApiError(404, "notFound", f"The resource '{what}' was not found")


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid", message)


def project_path(project: str) -> str:
    return f"projects/{project}"


def region_url(project: str, region: str) -> str:
    return f"{API_ROOT}/projects/{project}/regions/{region}"


def zone_url(project: str, zone: str) -> str:
    return f"{API_ROOT}/projects/{project}/zones/{zone}"


def mig_path(project: str, region: str, name: str) -> str:
    return f"projects/{project}/regions/{region}/instanceGroupManagers/{name}"


def mig_url(project: str, region: str, name: str) -> str:
    return f"{API_ROOT}/{mig_path(project, region, name)}"


def instance_url(project: str, zone: str, name: str) -> str:
    return f"{zone_url(project, zone)}/instances/{name}"


def template_url(project: str, mig_name: str) -> str:
    return f"{API_ROOT}/projects/{project}/global/instanceTemplates/{mig_name}-template"


def instance_group_url(project: str, region: str, name: str) -> str:
    return f"{region_url(project, region)}/instanceGroups/{name}"


def operation_url(project: str, region: str, name: str) -> str:
    return f"{region_url(project, region)}/operations/{name}"


def parse_instance_ref(ref: str) -> tuple[str | None, str]:
    """``.../zones/Z/instances/N`` (full URL, partial path) or a bare name -> (zone or None, name)."""
    parts = [p for p in ref.strip().split("/") if p]
    if not parts:
        return None, ""
    name = parts[-1]
    zone = None
    if len(parts) >= 2 and parts[-2] == "instances":
        if len(parts) >= 4 and parts[-4] == "zones":
            zone = parts[-3]
    elif len(parts) > 1:
        return None, ref  # something that is not an instance reference
    return zone, name


class Timestamps:
    """Cloud seconds -> RFC 3339 wall-clock strings, from a fixed start instant."""

    def __init__(self, start: datetime | None = None):
        start = start or datetime.now(timezone.utc)
        if start.tzinfo is None:
            start = start.replace(tzinfo=timezone.utc)
        self.start = start

    def at(self, t: float) -> str:
        return (self.start + timedelta(seconds=t)).isoformat(timespec="milliseconds")


ACTION_KEYS = {
    "ABANDONING": "abandoning",
    "CREATING": "creating",
    "CREATING_WITHOUT_RETRIES": "creatingWithoutRetries",
    "DELETING": "deleting",
    "NONE": "none",
    "RECREATING": "recreating",
    "REFRESHING": "refreshing",
    "RESTARTING": "restarting",
    "RESUMING": "resuming",
    "STARTING": "starting",
    "STOPPING": "stopping",
    "SUSPENDING": "suspending",
    "VERIFYING": "verifying",
}


def actions_summary(actions: list[str]) -> dict[str, int]:
    summary = {key: 0 for key in ACTION_KEYS.values()}
    for action in actions:
        summary[ACTION_KEYS[action]] += 1
    return summary


def page(items: list[Any], query: dict[str, str], key: str) -> dict[str, Any]:
    """Slice ``items`` by ``maxResults`` / ``pageToken`` (an offset) the way list calls page."""
    try:
        start = int(query.get("pageToken") or 0)
        size = int(query.get("maxResults") or 500)
    except ValueError:
        raise invalid("Invalid value for pageToken or maxResults") from None
    if start < 0 or size < 0:
        raise invalid("pageToken and maxResults must be >= 0")
    size = min(size or 500, 500)
    body: dict[str, Any] = {key: items[start : start + size]}
    if start + size < len(items):
        body["nextPageToken"] = str(start + size)
    return body
