"""A submission published without a ``job_id`` takes its Pub/Sub message id as its job id (the id the publisher's
``publish(...).result()`` returned). Refused, its refusal is that id's, as an explicit id's is: ``zen jobs get`` and
``zen rejected --job`` of the message id say why, and a subscriber following that id on ``zen-job-events``
(``attributes.job_id``) hears the ``job.rejected``. It was recorded under no id at all: the program that published
it was told "no job", and heard nothing while it waited for its job's events."""

from __future__ import annotations

import json

from tests.messages import job_request
from zen.store import repository


def refusals(publisher) -> list[tuple[dict, dict]]:
    return [(json.loads(m.data), dict(m.attributes)) for m in publisher.on("zen-job-events")
            if json.loads(m.data)["type"] == "job.rejected"]


def zen_cli(capsys, *argv: str) -> tuple[int, str, str]:
    from zen.cli.main import main

    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_refused_submission_without_a_job_id_is_told_under_its_message_id(functions, zen, publisher, capsys):
    response = functions.send("on_job_submitted", job_request(None, max_attempts=99), message_id="7301")
    assert response.status_code == 200
    with zen.db.transaction() as session:
        [row] = repository.list_rejections(session)
        assert repository.list_jobs(session) == []
    assert (row["message_id"], row["job_id"]) == ("7301", "7301"), row
    [(event, attributes)] = refusals(publisher)
    assert (event.get("job_id"), attributes.get("job_id")) == ("7301", "7301"), (event, attributes)
    code, out, err = zen_cli(capsys, "jobs", "get", "7301")
    assert code == 1 and "Zen refused a message for it" in err and "max_attempts 99 is above the limit" in err, err
    code, out, err = zen_cli(capsys, "rejected", "--job", "7301")
    assert code == 0 and "max_attempts 99 is above the limit" in out, (out, err)
    # Redelivered: still one refusal, and a corrected request published anew is its own job.
    assert functions.send("on_job_submitted", job_request(None, max_attempts=99), message_id="7301").status_code == 200
    assert functions.submit(job_request(None), message_id="7302").status_code == 200
    with zen.db.transaction() as session:
        assert len(repository.list_rejections(session)) == 1
        assert [job.job_id for job in repository.list_jobs(session)] == ["7302"]


def test_a_message_id_that_is_no_job_id_is_refused_under_no_id(functions, zen, publisher):
    assert functions.send("on_job_submitted", job_request(None), message_id="topic/7").status_code == 200
    with zen.db.transaction() as session:
        [row] = repository.list_rejections(session)
    assert row["job_id"] is None and "give a job_id" in row["reason"], row
