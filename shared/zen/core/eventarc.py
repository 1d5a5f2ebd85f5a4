"""Build the CloudEvent Eventarc delivers to a Cloud Function (gen2) for a Pub/Sub message.

Used by the local event bridge, the scripted demo and the tests, so all of them send exactly what
Eventarc sends: type ``google.cloud.pubsub.topic.v1.messagePublished``, data
``{"message": {"data": <base64>, "attributes", "messageId", "publishTime"}, "subscription"}``.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Any

from zen.core.events import PUBSUB_EVENT_TYPE


def pubsub_cloud_event(data: bytes, *, message_id: str, topic: str, project: str,
                       attributes: dict[str, str] | None = None, publish_time: datetime | None = None,
                       subscription: str | None = None) -> dict[str, Any]:
    """A structured-mode CloudEvent (``application/cloudevents+json``) as a dict."""
    published = (publish_time or datetime.now(timezone.utc)).isoformat().replace("+00:00", "Z")
    return {
        "specversion": "1.0",
        "id": message_id,
        "source": f"//pubsub.googleapis.com/projects/{project}/topics/{topic}",
        "type": PUBSUB_EVENT_TYPE,
        "datacontenttype": "application/json",
        "time": published,
        "data": {
            "message": {
                "data": base64.b64encode(data).decode(),
                "attributes": attributes or {},
                "messageId": message_id,
                "publishTime": published,
            },
            "subscription": subscription or f"projects/{project}/subscriptions/eventarc-{topic}",
        },
    }


def structured_request(event: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """Body and headers of a structured-mode HTTP delivery."""
    return json.dumps(event).encode(), {"Content-Type": "application/cloudevents+json"}


def binary_request(event: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """Body and headers of a binary-mode HTTP delivery (attributes as ``ce-`` headers)."""
    headers = {f"ce-{k}": str(v) for k, v in event.items() if k not in ("data", "datacontenttype")}
    headers["Content-Type"] = event.get("datacontenttype", "application/json")
    return json.dumps(event["data"]).encode(), headers
