"""Resource names, field validation and the error type of the Pub/Sub stand-in (pure).

Owns what the real service checks before touching state: topic/subscription/project name
syntax, ack deadlines, retention and expiration durations, dead-letter and retry policies,
message limits, and the configurations this stand-in refuses as UNIMPLEMENTED. Errors are
raised as :class:`PubSubError` carrying a gRPC status code *name* so this module stays free
of gRPC; the server maps the name to ``grpc.StatusCode``.
"""

from __future__ import annotations

import datetime as dt
import re

from google.pubsub_v1 import types as T

DEFAULT_ACK_DEADLINE = 10
MIN_ACK_DEADLINE = 10
MAX_ACK_DEADLINE = 600
DEFAULT_RETENTION = 7 * 24 * 3600.0
MIN_RETENTION = 600.0
MAX_RETENTION = 7 * 24 * 3600.0
MAX_TOPIC_RETENTION = 31 * 24 * 3600.0
DEFAULT_EXPIRATION_TTL = 31 * 24 * 3600.0
MIN_EXPIRATION_TTL = 24 * 3600.0
DEFAULT_MAX_DELIVERY_ATTEMPTS = 5
DEFAULT_MIN_BACKOFF = 10.0
DEFAULT_MAX_BACKOFF = 600.0
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_ORDERING_KEY_BYTES = 1024
MAX_PUBLISH_BYTES = 10 * 1024 * 1024
# Pub/Sub's resource limit "Attached subscriptions per topic": 10,000 (https://cloud.google.com/pubsub/quotas,
# Resource limits); a create past it is refused.
MAX_SUBSCRIPTIONS_PER_TOPIC = 10_000
DELETED_TOPIC = "_deleted-topic_"

_ID_RE = re.compile(r"[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}")
_PROJECT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-.:]*")


class PubSubError(Exception):
    """An RPC failure: ``code`` is a ``grpc.StatusCode`` member name, e.g. ``"NOT_FOUND"``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def not_found(name: str) -> PubSubError:
    return PubSubError("NOT_FOUND", f"Resource not found (resource={short_id(name)}).")


def already_exists(name: str) -> PubSubError:
    return PubSubError(
        "ALREADY_EXISTS", f"Resource already exists in the project (resource={short_id(name)})."
    )


def invalid(message: str) -> PubSubError:
    return PubSubError("INVALID_ARGUMENT", message)


def check_room_on_topic(topic: str, attached: int) -> None:
    """A new subscription on ``topic``, which has ``attached`` subscriptions already, is refused past the limit."""
    if attached >= MAX_SUBSCRIPTIONS_PER_TOPIC:
        raise PubSubError("RESOURCE_EXHAUSTED", f"Your project has exceeded a limit: topic {short_id(topic)} has "
                                                f"{attached} attached subscriptions, the maximum is "
                                                f"{MAX_SUBSCRIPTIONS_PER_TOPIC}.")


def unimplemented(what: str) -> PubSubError:
    return PubSubError("UNIMPLEMENTED", f"{what} is not implemented by the local Pub/Sub stand-in.")


def short_id(name: str) -> str:
    return name.rsplit("/", 1)[-1]


# --- names ---------------------------------------------------------------------------------


def _check_name(name: str, collection: str) -> str:
    parts = name.split("/")
    if (
        len(parts) != 4
        or parts[0] != "projects"
        or parts[2] != collection
        or not _PROJECT_RE.fullmatch(parts[1])
        or not _ID_RE.fullmatch(parts[3])
        or parts[3].startswith("goog")
    ):
        raise invalid(f"Invalid [{collection}] name: (name={name})")
    return name


def check_topic_name(name: str) -> str:
    return _check_name(name, "topics")


def check_subscription_name(name: str) -> str:
    return _check_name(name, "subscriptions")


def check_project(name: str) -> str:
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != "projects" or not _PROJECT_RE.fullmatch(parts[1]):
        raise invalid(f"Invalid [projects] name: (name={name})")
    return parts[1]


def project_of(name: str) -> str:
    return name.split("/")[1]


# --- durations -----------------------------------------------------------------------------


def seconds(value: dt.timedelta) -> float:
    return value.total_seconds()


def duration_field(msg, field: str) -> float | None:
    """Seconds of a Duration field, or None when the field is unset."""
    if field not in msg:
        return None
    return seconds(getattr(msg, field))


# --- subscriptions -------------------------------------------------------------------------


def check_ack_deadline(value: int, *, allow_zero_default: bool = True) -> int:
    if value == 0 and allow_zero_default:
        return DEFAULT_ACK_DEADLINE
    if not MIN_ACK_DEADLINE <= value <= MAX_ACK_DEADLINE:
        raise invalid(
            f"Invalid ack deadline {value}s: it must be between {MIN_ACK_DEADLINE} and "
            f"{MAX_ACK_DEADLINE} seconds."
        )
    return value


def check_modify_deadline(value: int) -> int:
    if not 0 <= value <= MAX_ACK_DEADLINE:
        raise invalid(
            f"Invalid ack deadline {value}s: it must be between 0 and {MAX_ACK_DEADLINE} seconds."
        )
    return value


def retention_of(sub: T.Subscription) -> float:
    value = duration_field(sub, "message_retention_duration")
    if value is None or value == 0:
        return DEFAULT_RETENTION
    if not MIN_RETENTION <= value <= MAX_RETENTION:
        raise invalid(
            "Invalid message_retention_duration: it must be between 10 minutes and 7 days."
        )
    return value


def expiration_ttl_of(sub: T.Subscription) -> float | None:
    """Seconds of inactivity before deletion; None means never expires."""
    if "expiration_policy" not in sub:
        return DEFAULT_EXPIRATION_TTL
    ttl = duration_field(sub.expiration_policy, "ttl")
    if not ttl:
        return None
    if ttl < MIN_EXPIRATION_TTL:
        raise invalid("Invalid expiration_policy.ttl: the minimum is 1 day.")
    return ttl


def max_attempts_of(sub: T.Subscription) -> int | None:
    """The dead-letter attempt limit, or None when dead lettering is off."""
    if "dead_letter_policy" not in sub or not sub.dead_letter_policy.dead_letter_topic:
        if "dead_letter_policy" in sub and sub.dead_letter_policy.max_delivery_attempts:
            raise invalid("Invalid dead_letter_policy: dead_letter_topic is required.")
        return None
    check_topic_name(sub.dead_letter_policy.dead_letter_topic)
    attempts = sub.dead_letter_policy.max_delivery_attempts or DEFAULT_MAX_DELIVERY_ATTEMPTS
    if not 5 <= attempts <= 100:
        raise invalid(
            f"Invalid dead_letter_policy.max_delivery_attempts {attempts}: it must be between "
            "5 and 100."
        )
    return attempts


def backoff_of(sub: T.Subscription) -> tuple[float, float] | None:
    """(minimum, maximum) redelivery backoff in seconds, or None for immediate redelivery."""
    if "retry_policy" not in sub:
        return None
    policy = sub.retry_policy
    low = duration_field(policy, "minimum_backoff")
    high = duration_field(policy, "maximum_backoff")
    low = DEFAULT_MIN_BACKOFF if low is None else low
    high = DEFAULT_MAX_BACKOFF if high is None else high
    if not (0 <= low <= 600 and 0 <= high <= 600) or low > high:
        raise invalid(
            "Invalid retry_policy: backoffs must be between 0 and 600 seconds and "
            "minimum_backoff must not exceed maximum_backoff."
        )
    return low, high


def reject_unsupported_subscription(sub: T.Subscription) -> None:
    """UNIMPLEMENTED for delivery modes this stand-in does not provide."""
    if sub.push_config.push_endpoint:
        raise unimplemented("Push delivery (push_config.push_endpoint)")
    if "bigquery_config" in sub and sub.bigquery_config.table:
        raise unimplemented("BigQuery subscriptions")
    if "cloud_storage_config" in sub and sub.cloud_storage_config.bucket:
        raise unimplemented("Cloud Storage subscriptions")
    if "bigtable_config" in sub and sub.bigtable_config.table:
        raise unimplemented("Bigtable subscriptions")
    if sub.enable_exactly_once_delivery:
        raise unimplemented("Exactly-once delivery")
    if len(sub.message_transforms):
        raise unimplemented("Message transforms")
    if sub.detached:
        raise invalid("detached is output only; use DetachSubscription.")


def reject_unsupported_topic(topic: T.Topic) -> None:
    if "schema_settings" in topic and topic.schema_settings.schema:
        raise unimplemented("Topic schemas")
    if topic.kms_key_name:
        raise unimplemented("Customer-managed encryption keys")
    if "ingestion_data_source_settings" in topic:
        raise unimplemented("Topic ingestion sources")
    if len(topic.message_transforms):
        raise unimplemented("Message transforms")
    retention = duration_field(topic, "message_retention_duration")
    if retention and not MIN_RETENTION <= retention <= MAX_TOPIC_RETENTION:
        raise invalid(
            "Invalid message_retention_duration: it must be between 10 minutes and 31 days."
        )


# --- messages ------------------------------------------------------------------------------


def check_messages(messages) -> int:
    """Validate raw ``PubsubMessage`` protobufs; returns the total size in bytes."""
    if not messages:
        raise invalid("The request must contain at least one message.")
    total = 0
    for message in messages:
        attributes = message.attributes
        if not message.data and not attributes:
            raise invalid("Some messages are empty: a message needs data or attributes.")
        if len(attributes) > MAX_ATTRIBUTES:
            raise invalid(f"A message can have at most {MAX_ATTRIBUTES} attributes.")
        for key, value in attributes.items():
            if not key:
                raise invalid("Attribute keys must not be empty.")
            if len(key.encode()) > MAX_ATTRIBUTE_KEY_BYTES:
                raise invalid(
                    f"Attribute key {key[:32]!r}... exceeds {MAX_ATTRIBUTE_KEY_BYTES} bytes."
                )
            if len(value.encode()) > MAX_ATTRIBUTE_VALUE_BYTES:
                raise invalid(f"Attribute {key!r} value exceeds {MAX_ATTRIBUTE_VALUE_BYTES} bytes.")
        if len(message.ordering_key.encode()) > MAX_ORDERING_KEY_BYTES:
            raise invalid(f"Ordering keys are limited to {MAX_ORDERING_KEY_BYTES} bytes.")
        total += message.ByteSize()
    if total > MAX_PUBLISH_BYTES:
        raise invalid(f"The publish request exceeds {MAX_PUBLISH_BYTES} bytes.")
    return total
