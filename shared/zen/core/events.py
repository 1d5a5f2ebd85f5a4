"""From what arrives to a validated message: Eventarc's ``google.cloud.pubsub.topic.v1.messagePublished``
CloudEvent -> ``PubSubEnvelope`` (``envelope_from_cloud_event``), and its payload -> a message model
(``decode_payload``).

The CloudEvent's data is ``{"message": {"data": <base64>, "attributes": {...}, "messageId": "...",
"publishTime": "..."}, "subscription": "projects/P/subscriptions/S"}``. An envelope that cannot be
read raises ``Rejected`` (the caller records it and acks).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zen.core.documents import DuplicateKey, load_json
from zen.core.errors import Rejected, describe_validation_error
from zen.core.models import JOB_ID_PATTERN
from zen.core.text import escape_unstorable

PUBSUB_EVENT_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"
MESSAGE_ID = re.compile(r"^[\x21-\x7e]{1,256}\Z")  # Pub/Sub's are decimal digits


class PubSubEnvelope(BaseModel):
    """What arrives at a function: the decoded Pub/Sub message of an Eventarc CloudEvent."""

    model_config = ConfigDict(frozen=True)
    message_id: str
    data: bytes
    attributes: dict[str, str] = Field(default_factory=dict)
    publish_time: datetime | None = None
    subscription: str | None = None


def envelope_from_cloud_event(event_id: str, event_type: str | None, data: Any) -> PubSubEnvelope:
    if event_type != PUBSUB_EVENT_TYPE:  # a missing or empty type is refused too
        raise Rejected(f"unexpected CloudEvent type {escape_unstorable(str(event_type), 200)!r}; "
                       f"expected {PUBSUB_EVENT_TYPE}")
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError):
            raise Rejected("CloudEvent data is not JSON") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("message"), Mapping):
        raise Rejected("CloudEvent data has no Pub/Sub 'message' object")
    message = data["message"]
    try:
        payload = base64.b64decode(message.get("data") or "", validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise Rejected("message.data is not valid base64") from None
    attributes = message.get("attributes") or {}
    if not isinstance(attributes, Mapping) or not all(isinstance(v, str) for v in attributes.values()):
        raise Rejected("message.attributes must map strings to strings")
    message_id = message.get("messageId") or message.get("message_id") or event_id
    if isinstance(message_id, bool) or not isinstance(message_id, (str, int)) or not MESSAGE_ID.match(str(message_id)):
        raise Rejected("message.messageId must be 1-256 printable ASCII characters")
    publish_time = message.get("publishTime") or message.get("publish_time")
    try:
        published = datetime.fromisoformat(publish_time.replace("Z", "+00:00")) if publish_time else None
    except (AttributeError, ValueError):
        published = None
    if published is not None and published.tzinfo is None:  # Pub/Sub's is UTC, "Z": a bare one is not it
        published = None
    return PubSubEnvelope(
        message_id=str(message_id), data=payload, attributes=dict(attributes), publish_time=published,
        subscription=data["subscription"] if isinstance(data.get("subscription"), str) else None,
    )


def decode_payload(envelope: PubSubEnvelope, model: type[BaseModel], max_bytes: int, data: Any = None) -> Any:
    """The envelope's payload as ``model`` (size, JSON, version, then the model's own rules);
    ``Rejected`` with a reason a person can act on. ``data``: the payload already parsed."""
    if len(envelope.data) > max_bytes:
        raise Rejected(f"payload is {len(envelope.data)} bytes; the limit is {max_bytes}")
    if data is None:
        data = parse_json(envelope.data)
    if not isinstance(data, dict):
        raise Rejected("payload must be a JSON object")
    version = data.get("version", 1)
    if type(version) is not int or version != 1:
        raise Rejected(f"unsupported message version {version!r}; this Zen understands version 1")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise Rejected(f"invalid {model.__name__}: {describe_validation_error(exc, model=model)}") from None


def parse_json(raw: bytes) -> Any:
    try:
        return load_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Rejected(f"payload is not valid UTF-8 JSON: {exc}") from None
    except DuplicateKey as exc:  # which of the two was meant is not Zen's guess
        raise Rejected(f"payload JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # e.g. a 5000-digit number, or 30000 nested brackets
        raise Rejected(f"payload JSON is beyond Zen's limits: {type(exc).__name__}: {str(exc)[:200]}") from None


def job_id_hint(raw: bytes) -> str | None:
    """The job_id of a message we reject, if it can be read at all (for the rejection event)."""
    try:
        value = json.loads(raw).get("job_id")
    except Exception:  # noqa: BLE001 - best effort only
        return None
    return value if isinstance(value, str) and JOB_ID_PATTERN.match(value) else None
