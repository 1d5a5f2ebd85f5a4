"""Call the Cloud Functions in-process through functions-framework, with Eventarc envelopes.

``functions_framework.create_app`` loads ``functions/main.py`` exactly as Cloud Functions does; the
invoker then hands that module a ``Zen`` built by the caller (the composition root's lazy global),
so tests and the scripted demo choose the database, publisher and clock.
"""

from __future__ import annotations

import itertools
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import functions_framework

from zen.core import eventarc

FUNCTIONS_MAIN = Path(__file__).resolve().parents[3] / "functions" / "main.py"


def _keep_source_folder_once() -> None:
    """Drop the copy of ``functions/`` that ``create_app`` just appended to ``sys.path`` when one was there
    already: it appends one at each load, and a process that built invokers test after test had thousands,
    each looked in by every import not yet cached (Flask's own lookups at each ``create_app`` among them)."""
    if len(sys.path) > 1 and sys.path[-1] in sys.path[:-1]:
        sys.path.pop()


class FunctionsInvoker:
    def __init__(self, zen, main: Path = FUNCTIONS_MAIN):
        self.zen = zen
        self.topics = {
            "on_job_submitted": zen.config.topics.job_submitted,
            "on_heartbeat": zen.config.topics.heartbeats,
            "on_stop_requested": zen.config.topics.job_stop,
            "on_scale_tick": zen.config.topics.scale_tick,
            "on_job_event": zen.config.topics.job_events,
        }
        self._ids = itertools.count(1)
        self._main = main
        self._clients: dict[str, Any] = {}  # target -> its app's test client, made at its first message

    def _client(self, target: str) -> Any:
        """The function's app, loaded at its first message (a test that sends only submissions loads one of
        five: each load runs ``functions/main.py`` and builds a Flask app, 4 ms or so)."""
        if target not in self._clients:
            app = functions_framework.create_app(target, str(self._main), "cloudevent")
            sys.modules["main"]._zen = self.zen  # the module create_app just loaded
            _keep_source_folder_once()
            self._clients[target] = app.test_client()
        return self._clients[target]

    def event(self, target: str, payload: Any, *, message_id: str | None = None,
              attributes: dict[str, str] | None = None, publish_time: datetime | None = None) -> dict:
        """``publish_time``: Pub/Sub's (None: now, by Zen's clock, as Pub/Sub takes a message it delivers at once:
        a test's or the demo's clock moved by hand; a message held back by an outage is older)."""
        raw = payload if isinstance(payload, bytes) else json.dumps(payload, default=str).encode()
        return eventarc.pubsub_cloud_event(raw, message_id=message_id or f"local-{next(self._ids)}",
                                           topic=self.topics[target], project=self.zen.config.project,
                                           attributes=attributes, publish_time=publish_time or self.zen.clock())

    def post(self, target: str, event: dict, *, binary: bool = False):
        body, headers = (eventarc.binary_request if binary else eventarc.structured_request)(event)
        return self._client(target).post("/", data=body, headers=headers)

    def send(self, target: str, payload: Any, *, message_id: str | None = None,
             attributes: dict[str, str] | None = None, binary: bool = False, publish_time: datetime | None = None):
        """POST one message; returns the HTTP response (200 = acked)."""
        return self.post(target, self.event(target, payload, message_id=message_id, attributes=attributes,
                                            publish_time=publish_time), binary=binary)

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
        if response.status_code != 200:
            raise AssertionError(f"function answered {response.status_code}: {response.get_data(as_text=True)}")
        return response
