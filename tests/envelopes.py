"""Build Eventarc CloudEvents carrying Pub/Sub messages, and call the functions through
functions-framework's own app, as Eventarc does."""

from __future__ import annotations

import base64
import itertools
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import functions_framework

ROOT = Path(__file__).resolve().parent.parent
MAIN = str(ROOT / "functions" / "main.py")
_ids = itertools.count(1)


def pubsub_cloud_event(payload: Any, *, topic: str, message_id: str | None = None,
                       attributes: dict[str, str] | None = None, project: str = "zen-local") -> dict:
    """A structured-mode CloudEvent as Eventarc POSTs it for a Pub/Sub message."""
    message_id = message_id or f"m{next(_ids)}"
    raw = payload if isinstance(payload, bytes) else json.dumps(payload, default=str).encode()
    now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    return {
        "specversion": "1.0",
        "id": message_id,
        "source": f"//pubsub.googleapis.com/projects/{project}/topics/{topic}",
        "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "datacontenttype": "application/json",
        "time": now,
        "data": {
            "message": {
                "data": base64.b64encode(raw).decode(),
                "attributes": attributes or {},
                "messageId": message_id,
                "publishTime": now,
            },
            "subscription": f"projects/{project}/subscriptions/eventarc-{topic}",
        },
    }


class FunctionsClient:
    """One functions-framework test client per entry point, all sharing one ``Zen``."""

    TOPICS = {
        "on_job_submitted": "zen-job-submitted",
        "on_heartbeat": "zen-heartbeats",
        "on_stop_requested": "zen-job-stop",
        "on_scale_tick": "zen-scale-tick",
    }

    def __init__(self, zen):
        self.zen = zen
        self._clients = {}
        for target in self.TOPICS:
            app = functions_framework.create_app(target, MAIN, "cloudevent")
            # create_app loads functions/main.py afresh as module "main": hand it this test's Zen
            # (the composition root's lazy global), instead of one built from the environment.
            sys.modules["main"]._zen = zen
            self._clients[target] = app.test_client()

    def post(self, target: str, event: dict, *, binary: bool = False):
        client = self._clients[target]
        if binary:
            headers = {f"ce-{k}": v for k, v in event.items() if k not in ("data", "datacontenttype")}
            headers["Content-Type"] = "application/json"
            return client.post("/", data=json.dumps(event["data"]), headers=headers)
        return client.post("/", data=json.dumps(event), headers={"Content-Type": "application/cloudevents+json"})

    def send(self, target: str, payload: Any, *, message_id: str | None = None,
             attributes: dict[str, str] | None = None, binary: bool = False):
        event = pubsub_cloud_event(payload, topic=self.TOPICS[target], message_id=message_id, attributes=attributes)
        response = self.post(target, event, binary=binary)
        return response

    def submit(self, payload: Any, **kw):
        return self._ok(self.send("on_job_submitted", payload, **kw))

    def heartbeat(self, payload: Any, **kw):
        return self._ok(self.send("on_heartbeat", payload, **kw))

    def stop(self, payload: Any, **kw):
        return self._ok(self.send("on_stop_requested", payload, **kw))

    def tick(self):
        return self._ok(self.send("on_scale_tick", {"tick": True}))

    @staticmethod
    def _ok(response):
        assert response.status_code == 200, (response.status_code, response.get_data(as_text=True))
        return response
