"""A stand-in VM's preemption notice, as GCE's metadata server gives it: ``instance/preempted`` answers
``FALSE``, then ``TRUE`` once the VM is preempted (``World.preempt``); with ``wait_for_change=true`` the
request waits (up to ``timeout_sec``, or ``MAX_WAIT_S``) until the value differs from the one its caller
last saw (``last_etag``) or, without one, until it changes. Served at
``/zen-local/vms/<vm>/computeMetadata/v1/instance/preempted`` (the agent's ``ZEN_PREEMPTION_METADATA_HOST``).
"""

from __future__ import annotations

import re
import time
from typing import Any

PATH = re.compile(r"^/zen-local/vms/(?P<vm>[^/]+)/computeMetadata/v1/instance/preempted$")
MAX_WAIT_S = 60.0
POLL_S = 0.05
_HEADERS = {"Metadata-Flavor": "Google", "Content-Type": "application/text"}


def _state(world: Any, vm: str) -> bool | None:
    """Whether the VM of that name has had its notice; None when no such VM exists (any more)."""
    with world.lock:
        for mig in world.migs.values():
            inst = mig.instances.get(vm)
            if inst is not None and not inst.removed:
                return bool(getattr(inst, "preempted", False))
    return None


def answer(world: Any, path: str, query: dict[str, str]) -> tuple[int, str, dict[str, str]] | None:
    """The answer to a GET of ``path``, or None when it is not this endpoint."""
    match = PATH.match(path)
    if match is None:
        return None
    vm = match["vm"]
    now = _state(world, vm)
    if now is None:
        return 404, f"no VM {vm}", {"Metadata-Flavor": "Google"}
    if query.get("wait_for_change", "").lower() == "true":
        seen = {"TRUE": True, "FALSE": False}.get(query.get("last_etag", "").upper(), now)
        try:
            wait_s = min(MAX_WAIT_S, float(query.get("timeout_sec") or MAX_WAIT_S))
        except ValueError:
            return 400, "timeout_sec must be a number", {"Metadata-Flavor": "Google"}
        until = time.monotonic() + wait_s
        while now == seen and time.monotonic() < until:
            time.sleep(POLL_S)
            now = _state(world, vm)
            if now is None:
                return 404, f"no VM {vm}", {"Metadata-Flavor": "Google"}
    value = "TRUE" if now else "FALSE"
    return 200, value, {**_HEADERS, "ETag": value}
