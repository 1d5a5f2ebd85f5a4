"""`zen submit` of a job_id for which Zen keeps a stop (`zen stop --force ID` sent before any job had that id; Zen
keeps such a stop a week and cancels the job when it arrives) said "submitted ID"; the job was cancelled as it
arrived, and `--wait` followed it to CANCELLED. The CLI reads the kept stops before publishing: one whose sender
may stop the job refuses the submission, naming the id, who sent the stop and when, and what to do instead; one
Zen would not apply (its sender may not stop the job) publishes it as before."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from tests.messages import job_request
from tests.test_usercli_frictions import one_line, zen_cli  # noqa: F401 (fixture)
from tests.token_support import issuer  # noqa: F401 (fixture)
from zen.store import repository


def test_a_submit_of_an_id_a_stop_is_kept_for_is_refused_before_publishing(zen_cli, publisher, functions, db,
                                                                           tmp_path):
    stopped = zen_cli("stop", "--force", "exp-7", "--reason", "wrong data")
    assert stopped.returncode == 0, stopped.stderr
    [stop] = publisher.on("zen-job-stop")
    functions.stop(stop.data, attributes=dict(stop.attributes))  # kept: no job exp-7 yet
    for wait in ((), ("--wait",)):
        result = zen_cli("submit", *wait, "--job-id", "exp-7", "--cluster", "1xl4", "--", "python", "train.py",
                         ZEN_JOB_LOGS_DIR=str(tmp_path / "joblogs"))
        assert result.returncode == 1 and result.stdout == "", (result.stdout, result.stderr)
        line = one_line(result)
        assert "a stop is kept for job_id exp-7 (sent " in line and "by a sender without proof" in line, line
        assert ("Zen with ZEN_AUTH=off, as when it was kept, would cancel this job as it arrives (one that requires "
                "proof now would run it). Not published; use a new job_id") in line, line
    assert publisher.on("zen-job-submitted") == []
    fresh = zen_cli("submit", "--cluster", "1xl4", "--", "python", "train.py")  # a new id: as before
    assert fresh.returncode == 0 and fresh.stdout.startswith("submitted "), fresh.stderr
    array = zen_cli("submit", "--job-id", "exp-7", "--array", "2", "--cluster", "1xl4", "--", "true")
    assert "would cancel every task of this array as it arrives" in one_line(array)
    functions.submit(job_request("exp-7", cluster="1xl4"))  # published by other means: what the refusal foretold
    with db.transaction() as session:
        assert repository.get_job(session, "exp-7").status.value == "CANCELLED"


def test_a_stop_zen_would_not_apply_leaves_the_submit_as_it_was(zen_cli, publisher, functions, db, issuer):
    """Kept from a sender who may not stop the job (not its owner nor an admin), a stop is only noted in the
    job's history: the job runs, so the submission goes out. The owner's own kept stop refuses it."""
    from zen.core.config import GCLOUD_CLIENT_IDS

    with db.transaction() as session:
        repository.remember_early_stop(session, "exp-8", "not mine to stop", datetime.now(timezone.utc), "bob@lab.example")
        repository.remember_early_stop(session, "exp-9", "mine", datetime.now(timezone.utc), "alice")
    alice = issuer.user_token(email="alice", audience=GCLOUD_CLIENT_IDS[0], now=time.time())
    published = zen_cli("submit", "--job-id", "exp-8", "--cluster", "1xl4", "--", "true", ZEN_ID_TOKEN=alice)
    assert published.returncode == 0 and published.stdout.startswith("submitted exp-8"), published.stderr
    refused = zen_cli("submit", "--job-id", "exp-9", "--cluster", "1xl4", "--", "true", ZEN_ID_TOKEN=alice)
    assert refused.returncode == 1 and "a stop is kept for job_id exp-9 (sent " in one_line(refused)
    assert " by alice, before any job had that id): Zen would cancel this job as it arrives." in refused.stderr, (
        refused.stderr)
    assert [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-submitted")] == ["exp-8"]
