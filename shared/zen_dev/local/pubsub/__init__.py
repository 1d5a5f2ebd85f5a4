"""Local stand-in for Google Cloud Pub/Sub: a gRPC server the official client uses unmodified.

Modules: ``filters`` (subscription filter language), ``resources`` (names, validation, errors),
``backlog`` (one subscription's messages and leases), ``state`` (topics, subscriptions, message
flow), ``service`` (gRPC servicers), ``server`` (:class:`PubSubStandIn` and ``main``).
"""

from .server import PubSubStandIn, main

__all__ = ["PubSubStandIn", "main"]
