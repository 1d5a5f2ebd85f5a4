"""Small builders for the payloads agents and users publish."""

from __future__ import annotations

from datetime import datetime, timezone


def job_request(job_id: str | None = "job-1", **overrides) -> dict:
    request = {"user_id": "alice", "cluster": "4xa100-40gb", "command": ["python", "train.py", "--epochs", "1"]}
    if job_id is not None:
        request["job_id"] = job_id
    request.update(overrides)
    return request


def heartbeat(job_id: str, status: str, seq: int, *, attempt: int = 1, vm: str = "vm-a",
              region: str = "us-central1", zone: str = "us-central1-a", **extra) -> dict:
    return {
        "job_id": job_id, "attempt": attempt, "vm": vm, "region": region, "zone": zone, "status": status,
        "seq": seq, "sent_at": datetime.now(timezone.utc).isoformat(), **extra,
    }


def agent_run(job_id: str, *, attempt: int = 1, vm: str = "vm-a", final: str = "SUCCEEDED", exit_code: int = 0,
              running_beats: int = 2) -> list[dict]:
    """What one agent sends for one attempt, in order: CLAIMED, RUNNING xN, then the final status."""
    beats = [heartbeat(job_id, "CLAIMED", 1, attempt=attempt, vm=vm)]
    for i in range(running_beats):
        beats.append(heartbeat(job_id, "RUNNING", 2 + i, attempt=attempt, vm=vm))
    beats.append(heartbeat(job_id, final, 2 + running_beats, attempt=attempt, vm=vm, exit_code=exit_code,
                           message="done"))
    return beats
