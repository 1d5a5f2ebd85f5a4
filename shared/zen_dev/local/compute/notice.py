"""A stand-in VM's notices, as GCE's metadata server gives them: ``instance/preempted`` answers ``FALSE``, then
``TRUE`` once the VM is preempted (``World.preempt``); ``instance/maintenance-event`` answers ``NONE``, then
``TERMINATE_ON_HOST_MAINTENANCE`` once a host maintenance is coming for it (``maintenance.py``: a GPU VM, which
cannot live-migrate, is terminated at the notice window's end). With ``wait_for_change=true`` the request waits (up
to ``timeout_sec``, or ``MAX_WAIT_S``) until the value differs from the one its caller last saw (``last_etag``) or,
without one, until it changes. Served at ``/zen-local/vms/<vm>/computeMetadata/v1/instance/<key>`` (the agent's
``ZEN_PREEMPTION_METADATA_HOST``).
"""

from __future__ import annotations

import re
import time
from typing import Any

PATH = re.compile(r"^/zen-local/vms/(?P<vm>[^/]+)/computeMetadata/v1/instance/(?P<key>preempted|maintenance-event)$")
MAX_WAIT_S = 60.0
POLL_S = 0.05
_HEADERS = {"Metadata-Flavor": "Google", "Content-Type": "application/text"}
# Each key's values: before its notice, and after.
_VALUES = {"preempted": ("FALSE", "TRUE"), "maintenance-event": ("NONE", "TERMINATE_ON_HOST_MAINTENANCE")}


def _state(world: Any, vm: str, key: str) -> str | None:
    """The key's value for the VM of that name; None when no such VM exists (any more)."""
    with world.lock:
        for mig in world.migs.values():
            inst = mig.instances.get(vm)
            if inst is not None and not inst.removed:
                noticed = inst.preempted if key == "preempted" else inst.maintenance
                return _VALUES[key][bool(noticed)]
    return None


def answer(world: Any, path: str, query: dict[str, str]) -> tuple[int, str, dict[str, str]] | None:
    """The answer to a GET of ``path``, or None when it is not this endpoint."""
    match = PATH.match(path)
    if match is None:
        return None
    vm, key = match["vm"], match["key"]
    now = _state(world, vm, key)
    if now is None:
        return 404, f"no VM {vm}", {"Metadata-Flavor": "Google"}
    if query.get("wait_for_change", "").lower() == "true":
        etag = query.get("last_etag", "").upper()
        seen = etag if etag in _VALUES[key] else now
        try:
            wait_s = min(MAX_WAIT_S, float(query.get("timeout_sec") or MAX_WAIT_S))
        except ValueError:
            return 400, "timeout_sec must be a number", {"Metadata-Flavor": "Google"}
        until = time.monotonic() + wait_s
        while now == seen and time.monotonic() < until:
            time.sleep(POLL_S)
            now = _state(world, vm, key)
            if now is None:
                return 404, f"no VM {vm}", {"Metadata-Flavor": "Google"}
    return 200, now, {**_HEADERS, "ETag": now}
