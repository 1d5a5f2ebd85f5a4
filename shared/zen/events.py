"""Eventarc's ``google.cloud.pubsub.topic.v1.messagePublished`` CloudEvent -> ``PubSubEnvelope``.

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

from zen.errors import Rejected
from zen.models import PubSubEnvelope
from zen.text import escape_unstorable

PUBSUB_EVENT_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"
MESSAGE_ID = re.compile(r"^[\x21-\x7e]{1,256}$")  # Pub/Sub's are decimal digits


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
    return PubSubEnvelope(
        message_id=str(message_id), data=payload, attributes=dict(attributes), publish_time=published,
        subscription=data["subscription"] if isinstance(data.get("subscription"), str) else None,
    )
