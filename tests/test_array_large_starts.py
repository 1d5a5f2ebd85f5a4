"""An array's start messages reach Pub/Sub however large they are together: the relay sends them in Publish
requests of up to 8 MB (``zen.adapters.pubsub.TopicLane``, under Pub/Sub's 10 MB a request), and the local
Pub/Sub stand-in takes such a request as Pub/Sub does. It refused every request over gRPC's default 4 MB with
RESOURCE_EXHAUSTED, and the tick resent the same rows in the same requests: on the local stack, an array of
80 tasks whose request is near the 64 KiB submission limit never started one task."""

from __future__ import annotations

import json

from tests.messages import job_request

TASKS = 80
BLOB = "x" * 58_000  # a request near limits.max_message_bytes (64 KiB): each task's start carries it


def unsent_starts(zen) -> list[dict]:
    zen.relay.marks.flush()  # how each publish ended, written now
    with zen.db.transaction() as session:
        return session.sql("SELECT id, last_error FROM outbox WHERE topic = 'zen-job-start' AND sent_at IS NULL")


def test_every_start_of_a_large_array_is_published(zen_and_fn, publisher):
    zen, fn = zen_and_fn
    request = job_request("wide", array={"count": TASKS}, env={"BLOB": BLOB})
    assert len(json.dumps(request)) < zen.config.limits.max_message_bytes
    fn.submit(request)
    assert [row["last_error"] for row in unsent_starts(zen)][:1] == []
    fn.tick()  # nothing is left for it to resend
    published = [json.loads(m.data) for m in publisher.on("zen-job-start")]
    assert sorted(m["job_id"] for m in published) == sorted(f"wide-{i}" for i in range(TASKS))
    assert all(m["env"]["BLOB"] == BLOB and m["env"]["ZEN_ARRAY_COUNT"] == str(TASKS) for m in published)
