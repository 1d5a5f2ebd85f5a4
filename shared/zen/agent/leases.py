"""Lease operations on a start message (ack, nack, extend) whose failure is survivable: the lease simply
runs out, and Pub/Sub redelivers the message. A failure is logged; none raises."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from zen.agent.transport import StartDelivery, TransportError

if TYPE_CHECKING:
    from zen.agent.transport import Transport


class Leases:
    def __init__(self, transport: Transport, log: logging.LoggerAdapter[logging.Logger]) -> None:
        self._transport = transport
        self._log = log

    def ack(self, delivery: StartDelivery) -> bool:
        return self._quietly(lambda: self._transport.ack(delivery), delivery, "ack")

    def nack(self, delivery: StartDelivery) -> bool:
        return self._quietly(lambda: self._transport.nack(delivery), delivery, "nack")

    def extend(self, delivery: StartDelivery, seconds: int) -> bool:
        return self._quietly(lambda: self._transport.extend(delivery, seconds), delivery, "extend lease")

    def _quietly(self, call: Callable[[], None], delivery: StartDelivery, what: str) -> bool:
        try:
            call()
            return True
        except TransportError as exc:
            self._log.warning(f"{what} failed", extra={"message_id": delivery.message_id, "error": str(exc)})
            return False
