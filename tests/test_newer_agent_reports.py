"""Version skew: a VM keeps the agent it booted with while the functions are redeployed, so after a rollback of the
functions (or a deploy that reached the MIGs' template before every function) older functions read a newer agent's
reports. A field such an agent adds (an optional one: docs/reference/messages.md, Versions) is ignored by the
heartbeat function, named once in its log; the report is taken. Refused whole, every report of the attempt was
dropped: its job, running on the VM, was swept as silent, LOST and run again elsewhere (an attempt spent, two VMs
billed), and its final report never counted. A report that is malformed is still refused, with its reason."""

from __future__ import annotations

import logging

from tests.messages import heartbeat, job_request
from zen.store import repository

NEWER = {"gpu_util": 0.93, "agent_build": "2027.1"}  # fields a later agent might send


def _job(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def _rejected(db) -> int:
    with db.transaction() as session:
        return session.sql("SELECT count(*) AS n FROM rejected_messages")[0]["n"]


def test_a_newer_agents_reports_are_taken_with_their_unknown_fields_ignored(zen_and_fn, db, caplog):
    zen, fn = zen_and_fn
    E = int(zen.clock().timestamp() * 1000)
    fn.submit(job_request("skew"))
    caplog.set_level(logging.WARNING, logger="zen.jobs.service")
    fn.heartbeat(heartbeat("skew", "CLAIMED", E + 1, gives_way=True, **NEWER))
    fn.heartbeat(heartbeat("skew", "RUNNING", E + 2, **NEWER))
    assert _job(zen, "skew").status.value == "RUNNING"
    fn.heartbeat({"kind": "vm", "vm": "vm-a", "cluster": "4xa100-40gb", "region": "us-central1",
                  "zone": "us-central1-a", "state": "BUSY", "seq": E + 3, "sent_at": zen.clock().isoformat(),
                  "job_id": "skew", "attempt": 1, **NEWER})
    fn.heartbeat(heartbeat("skew", "SUCCEEDED", E + 4, exit_code=0, **NEWER))
    job = _job(zen, "skew")
    assert (job.status.value, job.attempt) == ("SUCCEEDED", 1)
    assert _rejected(db) == 0
    named = [r for r in caplog.records if r.getMessage().startswith("fields this Zen does not know ignored")]
    assert [(r.model, r.fields) for r in named] == [("Heartbeat", ["agent_build", "gpu_util"]),
                                                    ("VmHeartbeat", ["agent_build", "gpu_util"])]


def test_a_malformed_report_is_still_refused_with_its_reason(zen_and_fn, db):
    zen, fn = zen_and_fn
    E = int(zen.clock().timestamp() * 1000)
    fn.submit(job_request("bad"))
    fn.heartbeat(heartbeat("bad", "CLAIMED", E + 1, exit_code="0", **NEWER))  # a known field of the wrong type
    fn.heartbeat(heartbeat("bad", "CLAIMED", E + 2, kind="job", vm=""))
    assert _job(zen, "bad").status.value == "QUEUED"
    with db.transaction() as session:
        reasons = [row["reason"] for row in session.sql("SELECT reason FROM rejected_messages ORDER BY id")]
    assert len(reasons) == 2 and "exit_code" in reasons[0] and "vm" in reasons[1], reasons
