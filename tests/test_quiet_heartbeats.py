"""A heartbeat that changes nothing writes no line: heartbeats are most of Zen's traffic (a job's every 30 s, a VM's
every 60 s: some 130 million a month at 1,000 running jobs), so one 300-byte line each would be about 36 GiB a month of
Cloud Logging ingestion (docs/reference/metrics.md, "Log volume"). A status change writes its one
``job.status_changed`` line."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_heartbeat_seq import vm_beat
from tests.zen_lines import zen_lines
from zen import telemetry


def test_a_steady_job_or_vm_heartbeat_writes_no_line(functions, clock):
    functions.submit(job_request("j"))
    functions.heartbeat(vm_beat("IDLE", 1_000, clock()))
    with zen_lines() as stream:
        functions.heartbeat(heartbeat("j", "CLAIMED", 1, vm="vm-b"))
        functions.heartbeat(heartbeat("j", "RUNNING", 2, vm="vm-b"))
        changes = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
        assert [(e.get("event"), e.get("to_status")) for e in changes] == [
            (telemetry.JOB_STATUS_CHANGED, "ASSIGNED"), (telemetry.JOB_STATUS_CHANGED, "RUNNING")], changes
        stream.seek(0)
        stream.truncate()
        for beat in range(5):
            clock.advance(30)
            functions.heartbeat(heartbeat("j", "RUNNING", 3 + beat, vm="vm-b"))
            functions.heartbeat(vm_beat("BUSY", 2_000 + beat, clock()))
        assert stream.getvalue() == "", stream.getvalue()
