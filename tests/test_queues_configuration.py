"""Queues changed in the configuration while jobs wait PENDING: the section removed (every job is then
admitted at once, those already waiting too), and a queue that loses its quota for a cluster (its
jobs there wait, with the reason). Through the functions, against a real Postgres."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.test_queues import (  # noqa: F401 - fixture
    CLUSTER, ONE_QUEUE, queued_zen, started, statuses, with_queues,
)
from zen.store import repository
from zen.store.jobstore import PostgresJobTx


def explain(config, db, job_id, tmp_path, monkeypatch, capsys) -> str:
    """``zen explain JOB`` under ``config``."""
    import json

    import yaml

    from zen.cli.queues import explain_job

    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(config.model_dump_json())))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    assert explain_job(job_id, False, db) == 0
    return capsys.readouterr().out.strip()


@pytest.mark.queues(ONE_QUEUE)
def test_without_queues_the_jobs_left_pending_are_admitted_by_the_next_tick(queued_zen, config, db, publisher,
                                                                              clock, tmp_path, monkeypatch, capsys):
    from zen.app import Zen

    zen, functions = queued_zen
    for n in range(4):
        functions.submit(job_request(f"j{n}"))
        clock.advance(1)
    assert statuses(zen, "j0", "j1", "j2", "j3") == ["QUEUED", "QUEUED", "PENDING", "PENDING"]
    plain = Zen(config, db, publisher, clock)  # the operator removed the queues: section
    assert explain(config, db, "j2", tmp_path, monkeypatch, capsys) == (
        "j2: PENDING - no queues are configured: admitted at the next scale tick")
    assert plain.on_scale_tick().admitted == 2
    assert statuses(zen, "j2", "j3") == ["QUEUED", "QUEUED"]
    assert started(publisher) == ["j0", "j1", "j2", "j3"]  # oldest first, each with its start
    with zen.db.transaction() as session:
        admitted = repository.job_history(session, "j2")[-1]
    assert (admitted["to_status"], admitted["reason"]) == ("QUEUED", "admitted: no queues are configured")


def test_with_queues_added_a_job_held_before_them_is_admitted_once_let_go(zen, functions, config, db, publisher, clock):
    """A job submitted before queues were configured (it has none), waiting out a retry's backoff as the
    operator adds them: once let go, no queue's pass reads it; it waited PENDING for ever, no start published.
    The tick admits it as it would have been then."""
    from tests.messages import agent_run
    from zen.app import Zen
    from zen.core.config import ZenConfig
    from zen_dev.local.invoke import FunctionsInvoker

    functions.submit(job_request("flaky", max_retries=1, retry_exit_codes=[3], retry_backoff_s=10))
    for beat in agent_run("flaky", final="FAILED", exit_code=3):
        functions.heartbeat(beat)
    queued = FunctionsInvoker(Zen(ZenConfig.model_validate({**config.model_dump(), "queues": ONE_QUEUE}), db,
                                  publisher, clock))
    clock.advance(11)
    queued.tick()
    queued.tick()
    assert statuses(zen, "flaky") == ["QUEUED"]
    with zen.db.transaction() as session:
        record = repository.get_job(session, "flaky")
        reason = repository.job_history(session, "flaky")[-1]["reason"]
    assert (record.attempt, record.queue, reason) == (2, None, "admitted: submitted before queues were configured")


def test_a_job_submitted_before_queues_and_let_go_since_is_explained_until_the_tick_admits_it(
        zen, functions, config, db, publisher, clock):
    """A job waiting on another, submitted before queues were configured: the other's end lets it go, and it
    waits for the tick's admission with no queue. `zen explain` said "PENDING" and nothing else."""
    from tests.messages import agent_run
    from zen.app import Zen
    from zen.cli.queues import explain_line
    from zen.core.config import ZenConfig
    from zen_dev.local.invoke import FunctionsInvoker

    functions.submit(job_request("prep"))
    functions.submit(job_request("train", after=["prep"]))
    with_queues = ZenConfig.model_validate({**config.model_dump(), "queues": ONE_QUEUE})
    queued = FunctionsInvoker(Zen(with_queues, db, publisher, clock))
    for beat in agent_run("prep"):
        queued.heartbeat(beat)
    with zen.db.transaction() as session:
        record = repository.get_job(session, "train")
        assert (record.status.value, record.queue, record.hold) == ("PENDING", None, None)
        assert explain_line(session, with_queues, record) == (
            "submitted before queues were configured: admitted at the next scale tick")
    queued.tick()
    assert statuses(zen, "train") == ["QUEUED"]


@pytest.mark.queues(ONE_QUEUE)
def test_a_queue_that_loses_its_quota_for_a_cluster_keeps_its_jobs_there_pending_with_the_reason(
        queued_zen, config, db, publisher, clock, tmp_path, monkeypatch, capsys):
    from zen.app import Zen

    zen, functions = queued_zen
    for n in range(3):
        functions.submit(job_request(f"j{n}"))
    moved = with_queues(config, [{**ONE_QUEUE[0], "quota": {"8xa100-40gb": 16}}])
    assert Zen(moved, db, publisher, clock).on_scale_tick().admitted == 0  # no other quota takes it
    assert statuses(zen, "j2") == ["PENDING"]
    assert explain(moved, db, "j2", tmp_path, monkeypatch, capsys) == (
        f"j2: PENDING - waiting for quota: queue research has no quota for cluster {CLUSTER} (its clusters: "
        "8xa100-40gb): the job waits until it has, or stop it and submit it again")


def test_passes_of_two_configurations_over_the_same_queue_take_the_same_lock(config, db, clock):
    """A deploy that moves a queue into a cohort runs old and new instances side by side. A pass took its
    cohort's lock (or the lone queue's), so the old instance's pass over queue a (alone) and the new
    one's (a in cohort lab) held different locks: each read a's admitted GPUs before the other's commit
    and both could admit into its free quota. Now a pass holds each member queue's lock (name order):
    both hold a's."""
    from zen.jobs.queueing import Queueing

    alone = with_queues(config, [{"name": "a", "quota": {CLUSTER: 8}, "users": ["alice"]}])
    cohort = with_queues(config, [{"name": "a", "cohort": "lab", "quota": {CLUSTER: 8}, "users": ["alice"]},
                                  {"name": "b", "cohort": "lab", "quota": {CLUSTER: 8}, "users": ["bob"]}])

    def locks_held(configuration) -> set[int]:
        with db.transaction() as session:
            Queueing(configuration).admit(PostgresJobTx(session), "a", CLUSTER, clock())
            return {row["objid"] for row in session.sql(
                "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")}

    def key(name: str) -> int:
        with db.transaction() as session:
            return session.sql("SELECT hashtext('zen-queue:' || :name) AS k", name=name)[0]["k"] & 0xFFFFFFFF

    assert locks_held(alone) == {key("queue:a")}
    assert locks_held(cohort) == {key("queue:a"), key("queue:b")}


def test_a_users_queue_is_found_whatever_the_case_of_their_address(config):
    """Authorization compares addresses case-insensitively; the queue a user's jobs go to did not, so
    Alice@Example.com's jobs went to the `default` queue instead of hers (and one address could be listed
    in two queues' users by case)."""
    from pydantic import ValidationError

    from tests.test_queues import with_queues

    queues = [{"name": "research", "quota": {"1xl4": 1}, "users": ["alice@example.com"]},
              {"name": "default", "quota": {"1xl4": 1}}]
    assert with_queues(config, queues).default_queue("Alice@Example.com").name == "research"
    with pytest.raises(ValidationError, match="is in the users of queues"):
        with_queues(config, [*queues[:1], {"name": "other", "quota": {"1xl4": 1}, "users": ["ALICE@example.com"]}])


def test_a_queue_named_where_none_is_configured_is_refused_not_dropped(config, db_url, publisher, monkeypatch, capsys):
    """Without a ``queues:`` section a job's ``queue`` was dropped: it ran unqueued, no quota counted it,
    and its submitter was never told. It is refused with the reason, at the CLI and at the function."""
    from zen.cli.main import main
    from zen.core.models import JobRequest
    from zen.jobs.placement import Rejected, resolve_request

    assert not config.queues
    request = JobRequest.model_validate({"user_id": "u", "cluster": CLUSTER, "command": ["true"], "queue": "team-a"})
    with pytest.raises(Rejected, match=r"queue 'team-a': this Zen has no queues .*submit without one"):
        resolve_request(config, request, "j")
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert main(["submit", "--cluster", CLUSTER, "--queue", "team-a", "--", "true"]) == 1
    assert "Zen would refuse this job: queue 'team-a': this Zen has no queues" in capsys.readouterr().err
    assert not publisher.on("zen-job-submitted")


def test_zen_submit_refuses_what_a_queues_rules_refuse_before_publishing(config, db_url, tmp_path, monkeypatch,
                                                                          capsys):
    """A priority above the queue's max_priority, or a queue its sender may not submit to, was published and
    "submitted": the function refused it (zen.jobs.authorization.may_submit) and the job never existed."""
    import json

    import yaml

    from zen.cli.main import main

    queues = [{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"], "max_priority": 100},
              {"name": "prod", "quota": {CLUSTER: 8}, "submitters": ["ci@proj.iam.gserviceaccount.com"]}]
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump({**json.loads(config.model_dump_json()), "queues": queues}))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    for args, said in ((["--priority", "500"], "priority 500 is above queue research's max_priority 100"),
                       (["--queue", "prod"], "alice may not submit to queue prod")):
        assert main(["submit", "--user", "alice", *args, "--cluster", CLUSTER, "--", "true"]) == 1
        assert f"Zen would refuse this job: {said}" in capsys.readouterr().err
