"""What the agent's transport hands the loop: a leased start message and a control message. Apart from
``zen.agent.transport`` so that what builds them (``zen.agent.slots``'s offers) does not import the Pub/Sub
client: ``python -m zen.agent --check`` and a start that fails before the loop never load it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable


@dataclass(frozen=True)
class StartDelivery:
    """One leased start message: pulled from the start subscription, or offered to this VM alone on its
    control subscription (``offer``: that message's ack; ``zen.agent.slots.ControlRouter``)."""

    ack_id: str
    message_id: str
    data: bytes
    attributes: dict[str, str]
    delivery_attempt: int
    offer: Callable[[], None] | None = None


@dataclass(frozen=True)
class ControlDelivery:
    """One control message; call ``ack`` once it has been acted on. ``published``: when Pub/Sub took it (its
    server's clock; a STOP's deadline counts from it, ``AttemptReport.stopped``); None where unknown."""

    message_id: str
    data: bytes
    attributes: dict[str, str]
    ack: Callable[[], None]
    published: datetime | None = None
