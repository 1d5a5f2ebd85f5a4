"""`zen stop` right after `zen submit` sends the stop when this machine's journal holds the published id and the
database does not show the job yet (zen.cli.submitted.published_lately). Not when Zen refused that submission (the
database holds the refusal): sent, the stop said "Zen keeps the stop and cancels the job when it arrives" and was
kept for days, and the user's corrected submission of that id was cancelled on arrival. It is refused as for any id
no job has."""

from __future__ import annotations

import json
import re

from tests.test_usercli_frictions import zen_cli  # noqa: F401 (fixture)
from zen.store import repository


def published(submitted) -> str:
    """The message id Pub/Sub gave a submission, as `zen submit` prints it (and its journal keeps it)."""
    return re.search(r"; message (\S+)\)", submitted.stdout)[1]


def test_a_stop_of_an_id_whose_submission_zen_refused_is_not_sent_as_on_its_way(zen_cli, publisher, functions, db):
    submitted = zen_cli("submit", "--job-id", "exp-1", "--cluster", "1xl4", "--", "true")
    assert submitted.returncode == 0, submitted.stderr
    [submit] = publisher.on("zen-job-submitted")
    bad = {**json.loads(submit.data), "priority": "urgent"}  # what the function refuses (a request it cannot take)
    functions.submit(json.dumps(bad).encode(), attributes=dict(submit.attributes),
                     message_id=published(submitted))  # refused, delivered under its Pub/Sub message id
    with db.transaction() as session:
        assert repository.get_job(session, "exp-1") is None
        assert repository.latest_rejection(session, "exp-1") is not None  # refused, said so in the database
    stopped = zen_cli("stop", "exp-1")  # the user believes exp-1 runs
    assert stopped.returncode == 1 and "no job exp-1 is known" in stopped.stderr, (stopped.stdout, stopped.stderr)
    for stop in publisher.on("zen-job-stop"):
        functions.stop(stop.data, attributes=dict(stop.attributes))
    functions.submit(submit.data, attributes=dict(submit.attributes))  # corrected, resubmitted (later, or elsewhere)
    with db.transaction() as session:
        status = repository.get_job(session, "exp-1").status.value
    assert status == "QUEUED", (status, stopped.stdout)
