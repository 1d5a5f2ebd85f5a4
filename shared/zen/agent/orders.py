"""Reading an order (``ControlMessage``) from the VM's control subscription, as a newer Zen may send it: the
functions are deployed before the agents, and a VM keeps the agent it booted with for days. A STOP or a
RELEASE is obeyed whatever fields it carries beyond what this agent knows (they make the agent do less: an
invalid STOP dropped let the job run on past it, billed); a CONFIRM with such a field is refused, as a start
with one is (docs/reference/messages.md, Versions)."""

from __future__ import annotations

import json
import logging

from pydantic import ValidationError

from zen.core.models import ControlAction, ControlMessage
from zen.core.vm_heartbeat import known_fields

OBEYED_AS_KNOWN = (ControlAction.STOP, ControlAction.RELEASE)  # taken without the fields this agent does not know


def read_order(data: bytes, message_id: str, log: logging.LoggerAdapter) -> ControlMessage:
    """The order ``data`` holds; ``ValidationError`` for one that is malformed, or a CONFIRM with a field this
    agent does not know. A STOP or RELEASE whose only fault is such fields (top-level ones) is read without them,
    and they are named in a WARNING."""
    try:
        return ControlMessage.model_validate_json(data)
    except ValidationError as exc:
        if not all(error["type"] == "extra_forbidden" and len(error["loc"]) == 1 for error in exc.errors()):
            raise
        known, unknown = known_fields(json.loads(data), ControlMessage)  # a JSON object: only its fields were refused
        order = ControlMessage.model_validate_json(json.dumps(known))
        if order.action not in OBEYED_AS_KNOWN:
            raise
        log.warning("order taken without the fields this agent does not know", extra={
            "message_id": message_id, "job_id": order.job_id, "attempt": order.attempt, "action": order.action.value,
            "fields": list(unknown)})
        return order
