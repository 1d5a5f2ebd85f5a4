"""A redelivery creates nothing new "nor is it refused, whatever changed since: ... the configuration"
(docs/how-to/arrays-and-pipelines.md). A job's redelivery is recognised by the fingerprint of the request as sent;
an array's tasks were fingerprinted as stored, with the requires_tags its data's clearance widened them to
(Resolved.stored): once data_clearance bound the array's input prefix, the redelivery of an array that runs was
taken for "another array of that id" and recorded and announced as refused (zen rejected, job.rejected), where
the same redelivery of a job was a duplicate. Each task is fingerprinted as sent now, and stored widened."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.test_data_clearance import INPUT, configured, functions_with, reasons
from zen.core.models import request_fingerprint


@pytest.mark.parametrize("array", [None, {"count": 2}], ids=["job", "array"])
def test_a_redelivery_after_data_clearance_binds_its_data_is_a_duplicate(config, db, publisher, clock, array):
    before = configured(config, clearance=[])  # us-central1 tagged hipaa, nothing bound yet
    zen, fn = functions_with(before, db, publisher, clock)
    request = job_request("sweep", inputs=INPUT, **({"array": array} if array else {}))
    fn.submit(request, message_id="m-sweep")
    with zen.db.transaction() as session:
        made = session.sql("SELECT count(*) AS n FROM jobs")[0]["n"]
    assert made == (2 if array else 1) and reasons(zen) == []

    _, after = functions_with(configured(config), db, publisher, clock)  # the operator binds the prefix
    after.submit(request, message_id="m-sweep")  # Pub/Sub delivers the accepted message again
    assert reasons(zen) == [], f"a redelivery of what runs is recorded as refused: {reasons(zen)}"


def test_an_array_under_a_clearance_keeps_its_tasks_widened(config, db, publisher, clock):
    zen, fn = functions_with(configured(config), db, publisher, clock)
    fn.submit(job_request("sweep", inputs=INPUT, array={"count": 2}), message_id="m-sweep")
    with zen.db.transaction() as session:
        tags = [row["tags"] for row in session.sql(
            "SELECT request->'requires_tags' AS tags FROM jobs WHERE job_id LIKE 'sweep-%' ORDER BY job_id")]
    assert tags == [["hipaa"], ["hipaa"]], tags
    fn.submit(job_request("sweep", inputs=INPUT, array={"count": 2}), message_id="m-sweep")  # a redelivery
    assert reasons(zen) == []


def test_a_redelivery_of_an_array_stored_by_the_previous_version_is_a_duplicate(config, db, publisher, clock):
    """Tasks an earlier version stored were fingerprinted as stored (widened): the redelivery of that very message,
    handled by an upgraded instance (or beside an old one during the rollout), is still a duplicate."""
    zen, fn = functions_with(configured(config), db, publisher, clock)  # the prefix bound: tasks widened to hipaa
    request = job_request("sweep", inputs=INPUT, array={"count": 2})
    fn.submit(request, message_id="m-sweep")
    with zen.db.transaction() as session:  # as the earlier version stored them: fingerprinted as stored
        rows = session.sql("SELECT job_id, request FROM jobs WHERE job_id LIKE 'sweep-%'")
        assert len(rows) == 2 and all(r["request"]["requires_tags"] == ["hipaa"] for r in rows)
        for row in rows:
            session.sql("UPDATE jobs SET request_hash = :h WHERE job_id = :j",
                        h=request_fingerprint(row["request"]), j=row["job_id"])
    fn.submit(request, message_id="m-sweep")  # Pub/Sub delivers the accepted message again
    assert reasons(zen) == [], reasons(zen)
