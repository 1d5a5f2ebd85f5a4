"""What Zen sends: an outgoing message, an outbox row holding one, and the shape the outbox statements
read. The job-store port and the outbox relay (``zen.jobs.messaging``) both speak in these."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Sequence

from zen.core.models import Message


@dataclass(frozen=True)
class OutgoingMessage:
    topic: str  # short name, e.g. "zen-job-start"
    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Enqueued:
    """An outbox row: its id and the message it holds."""

    id: int
    message: OutgoingMessage


def outgoing(topic: str, message: Message, attributes: dict[str, str]) -> OutgoingMessage:
    return OutgoingMessage(topic, message.to_bytes(), attributes)


def outbox_entries(messages: Sequence[OutgoingMessage]) -> list[dict[str, object]]:
    """Messages as the outbox statements read them (data in base64)."""
    return [{"topic": m.topic, "data": base64.b64encode(m.data).decode("ascii"), "attributes": m.attributes}
            for m in messages]


def outbox_json(messages: Sequence[OutgoingMessage]) -> str:
    """Messages as the JSON array the outbox statements read (one parameter)."""
    return json.dumps(outbox_entries(messages))
