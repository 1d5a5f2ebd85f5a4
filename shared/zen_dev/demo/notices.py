"""The demo's notification: broken-6 (it exits 3) names the local stack's webhook sink by the secret holding its
URL (``zen_dev.local.stack.SINK_SECRETS``); the notifier tells the sink of its FAILED end, once
(zen.jobs.notifications; docs/how-to/notifications.md)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

BROKEN_ID = "broken-6"
SINK_SECRET = "projects/zen-demo/secrets/zen-notify-local-sink/versions/latest"


def broken_request() -> dict:
    return {"job_id": BROKEN_ID, "user_id": "demo", "cluster": "1xl4",
            "command": [sys.executable, "-c", "import sys; print('bad config'); sys.exit(3)"],
            "notify": [{"webhook": SINK_SECRET, "on": ["FAILED"]}]}


def check(home: Path, wait_s: float = 15.0) -> tuple[list[str], list[str]]:
    """(lines for the summary, problems): one FAILED notice of broken-6 received by the sink (it may still
    be on its way when the jobs are over: waited for at most ``wait_s``)."""
    path, deadline, received = home / "notifications.jsonl", time.monotonic() + wait_s, []
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        received = [r for r in map(json.loads, lines) if isinstance(r.get("body"), dict)
                    and r["body"].get("job_id") == BROKEN_ID]
        if received or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if [(r["body"].get("event"), r["answer"]) for r in received] != [("FAILED", 200)]:
        return [], [f"the webhook sink got {len(received)} notice(s) of {BROKEN_ID}, expected one FAILED"]
    return [f"  {BROKEN_ID}'s webhook (its URL in the secret {SINK_SECRET}) got: {received[0]['body']['text']}"], []
