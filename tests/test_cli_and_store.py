"""The ``zen`` command against a real Postgres, migrations, and the URL parsing."""

from __future__ import annotations

import json

import pytest

from tests.messages import agent_run, heartbeat, job_request
from zen.cli.main import main
from zen.store.db import Database, parse_database_url
from zen.store.migrate import migrate, migration_files


def test_migrate_is_idempotent_and_reports_up_to_date(db_url, db, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert migrate(db) == []  # the template already has everything
    assert main(["db", "migrate"]) == 0
    assert capsys.readouterr().out.strip() == "schema is up to date"


def _schema(database: Database) -> list[tuple]:
    with database.transaction() as session:
        rows = session.sql(
            "SELECT table_name, column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, column_name")
        indexes = session.sql("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1")
    return [tuple(r.values()) for r in rows] + [tuple(r.values()) for r in indexes]


def test_migrations_applied_one_by_one_match_a_fresh_install(pg_server, db):
    admin = Database.from_target(pg_server)
    with admin.session() as session:
        session.execute("DROP DATABASE IF EXISTS zen_fresh WITH (FORCE)")
        session.execute("CREATE DATABASE zen_fresh")
    fresh = Database.from_target(pg_server.with_database("zen_fresh"))
    try:
        assert migrate(fresh) == [path.name for _, _, path in migration_files()]
        assert migrate(fresh) == []
        assert _schema(fresh) == _schema(db)
    finally:
        fresh.close()
        with admin.session() as session:
            session.execute("DROP DATABASE zen_fresh WITH (FORCE)")
        admin.close()


def test_jobs_list_get_history(functions, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("job-1"))
    functions.submit(job_request("job-2"))
    for beat in agent_run("job-1", exit_code=0):
        functions.heartbeat(beat)
    capsys.readouterr()

    assert main(["jobs", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(j["job_id"], j["status"]) for j in listed] == [("job-2", "QUEUED"), ("job-1", "SUCCEEDED")]
    for key in ("job_id", "status", "attempt", "cluster", "queue", "region", "vm", "submitted_at", "started_at",
                "finished_at", "exit_code"):  # the table's columns (queue: None without queues)
        assert key in listed[0]

    assert main(["jobs", "list", "--status", "QUEUED", "--json"]) == 0
    assert [j["job_id"] for j in json.loads(capsys.readouterr().out)] == ["job-2"]

    assert main(["jobs", "get", "job-1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["status"], got["exit_code"], got["vm"], got["region"]) == ("SUCCEEDED", 0, "vm-a", "us-central1")

    assert main(["jobs", "history", "job-1", "--json"]) == 0
    assert [r["to_status"] for r in json.loads(capsys.readouterr().out)] == [
        "PENDING", "QUEUED", "ASSIGNED", "RUNNING", "SUCCEEDED"]

    assert main(["jobs", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["JOB_ID", "USER", "QUEUE", "CLUSTER", "REGION", "STATUS", "ATTEMPT", "SUBMITTED",
                                "WAIT", "DURATION", "EXIT"] and len(table) == 3
    assert main(["jobs", "list", "--queue", "nosuch", "--json"]) == 0  # no queues here: no job is in one
    assert json.loads(capsys.readouterr().out) == []

    assert main(["jobs", "get", "nope"]) == 1


def test_zen_jobs_get_shows_what_a_job_runs_and_only_the_tail_of_its_output(functions, db_url, monkeypatch, capsys):
    """It showed neither the command, image, labels, env keys nor queue, and printed all 4 KiB of a
    final report's output tail; env values and secret values are never shown (only names)."""
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("job-9", image="us-docker.pkg.dev/p/ml/train:1", labels={"team": "ml"},
                                 env={"SEED": "1", "TOKEN_HINT": "do-not-print"}))
    functions.heartbeat(heartbeat("job-9", "CLAIMED", 1, vm="vm-a"))
    output = "\n".join(f"step {n}" for n in range(200))
    functions.heartbeat(heartbeat("job-9", "FAILED", 2, vm="vm-a", exit_code=1, message=output))
    assert main(["jobs", "get", "job-9"]) == 0
    shown = capsys.readouterr().out
    assert "command: python train.py --epochs 1" in shown and "image: us-docker.pkg.dev/p/ml/train:1" in shown
    assert "labels: {'team': 'ml'}" in shown and "env_keys: ['SEED', 'TOKEN_HINT']" in shown
    assert "do-not-print" not in shown and "step 199" in shown and "step 100" not in shown
    assert "earlier line(s); the whole output: zen logs job-9" in shown
    assert main(["jobs", "get", "job-9", "--json"]) == 0
    assert "step 100" in json.loads(capsys.readouterr().out)["message"]  # scripts get all of it


@pytest.mark.parametrize("url, expected", [
    ("postgresql://postgres:@/postgres?host=/tmp/x", dict(user="postgres", database="postgres",
                                                          unix_sock="/tmp/x/.s.PGSQL.5432")),
    ("postgresql://zen:s%40cret@db.internal:6432/zen", dict(user="zen", password="s@cret", host="db.internal",
                                                             port=6432, database="zen")),
])
def test_parse_database_url(url, expected):
    target = parse_database_url(url)
    for key, value in expected.items():
        assert getattr(target, key) == value


@pytest.mark.parametrize("url", ["postgresql://postgres@/zen?host=/tmp/x", "postgresql://postgres@/zen?host=/tmp/x&port=5433",
                                 "postgresql://zen:s%40cret@db.internal:6432/zen"])
def test_a_target_gives_back_the_url_it_was_read_from(url):
    assert parse_database_url(url).url() == url


def test_parse_database_url_refuses_other_schemes():
    with pytest.raises(ValueError, match="must start with postgresql://"):
        parse_database_url("mysql://x")


def test_a_value_the_driver_cannot_send_is_data_rejected_and_its_connection_never_reused(db):
    """The store boundary: a driver-side conversion error stopped pg8000 between two protocol messages;
    the connection went back to the pool with a reply unread, and the next caller read it."""
    from datetime import datetime, timedelta, timezone

    import pytest

    from zen.core.errors import DataRejected

    beyond_utc = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-14)))
    for value in (beyond_utc, "\ud800"):
        with pytest.raises(DataRejected, match="a value cannot be sent to the database"):
            with db.transaction() as session:
                session.sql("SELECT :v AS v", v=value)
        for n in range(5):  # every later caller gets its own, correct answer
            with db.transaction() as session:
                assert session.sql("SELECT :n::int AS n", n=n) == [{"n": n}]
    with pytest.raises(DataRejected):
        with db.session() as session:
            session.sql("SELECT :v AS v", v="\ud800")
    with db.session() as session:
        assert session.sql("SELECT 7 AS n") == [{"n": 7}]


def test_a_value_beyond_a_postgres_limit_is_data_rejected_not_retried(db):
    """SQLSTATE class 54 (program limit exceeded), e.g. 54000: a region too large for the btree index
    vms_cluster_region (random text, so compression does not shrink it). Retrying cannot help: it is
    rejected like a data exception, not left to answer 500 on every delivery."""
    import random
    import string
    from datetime import datetime, timezone

    from zen.core.errors import DataRejected
    from zen.store import repository

    rnd = random.Random(1)
    region = "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(6000))
    now = datetime.now(timezone.utc)
    with pytest.raises(DataRejected, match=r"the database refused the data \(54000\)"):
        with db.transaction() as session:
            repository.upsert_vm(session, name="vm-x", cluster="4xa100-40gb", region=region, zone="z", state="IDLE",
                                 job_id=None, attempt=None, seq=1, sent_at=now, now=now)
    with db.session() as session:
        assert session.sql("SELECT count(*) AS n FROM vms") == [{"n": 0}]


def test_the_scripted_demo_module_imports():
    import zen_dev.demo.scripted  # `zen demo --scripted` once failed on a helper the CLI had renamed

    assert callable(zen_dev.demo.scripted.main)


def test_queues_json_without_queues_is_an_empty_list(db_url, monkeypatch, capsys):
    """`zen queues --json` with no queues configured printed nothing on stdout: not JSON."""
    from zen.core.config import load_config

    assert not load_config().queues
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert main(["queues", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_query_name_given_twice_is_refused(tmp_path):
    from zen.store.db import load_queries

    sql = tmp_path / "queries.sql"
    sql.write_text("-- name: a\nSELECT 1;\n\n-- name: b\nSELECT 2;\n\n-- name: a\nSELECT 3;\n")
    with pytest.raises(ValueError, match="'a' is given twice"):
        load_queries(sql)
    assert load_queries()  # the shipped file has none


def test_jobs_list_takes_a_status_in_any_case_and_stats_refuses_a_window_not_above_0(capsys):
    from zen.cli.main import build_parser

    assert build_parser().parse_args(["jobs", "list", "--status", "succeeded"]).status == "SUCCEEDED"
    for window in ("-5", "0", "nan", "soon", "inf", "1e300"):  # the last two overflowed the window's datetime
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(["stats", "--window", window])
        assert exit_.value.code == 2
        assert f"{window!r} is not a number above 0" in capsys.readouterr().err
    assert build_parser().parse_args(["stats", "--window", "5"]).window == 5.0


@pytest.mark.parametrize("command", [["jobs", "list"], ["jobs", "get", "x"], ["jobs", "history", "x"], ["explain"],
                                     ["explain", "x"], ["watch", "--once"], ["rejected"]])
def test_read_commands_before_zen_db_migrate_say_to_migrate(command, empty_db, monkeypatch, capsys):
    """A new deploy before `zen db migrate`: these printed the driver's raw error (a dict of fields)."""
    monkeypatch.setenv("ZEN_DATABASE_URL", empty_db.url())
    assert main(command) == 1
    err = capsys.readouterr().err
    assert err.startswith("zen: the database has no table ") and "run `zen db migrate`" in err and "{" not in err, err


@pytest.mark.parametrize("said, named", [('relation "jobs" does not exist', "table jobs"),
                                         ('column "left_vms" does not exist', "column left_vms"),
                                         ('column "left_vms" of relation "jobs" does not exist', "column left_vms")])
def test_what_a_schema_behind_the_code_lacks_is_named_as_the_server_says(said, named):
    from pg8000.exceptions import DatabaseError

    from zen.cli.kit import _schema_missing

    code = "42P01" if said.startswith("relation") else "42703"
    assert _schema_missing(DatabaseError({"S": "ERROR", "C": code, "M": said})) == named


def test_zen_explain_of_a_cluster_since_removed_shows_its_decisions(db, db_url, monkeypatch, capsys):
    """A cluster taken out of the configuration keeps its scaling decisions; `zen explain NAME` answered as for
    a name nothing has ever had ("no job, array or cluster named ...")."""
    from datetime import datetime, timezone

    with db.transaction() as session:
        session.run("insert_scaling_decision", now=datetime.now(timezone.utc), cluster="2xold", region="us-east1",
                    action="BLOCK", count=0, vm=None, reason="stockout: ZONE_RESOURCE_POOL_EXHAUSTED")
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.delenv("ZEN_COMPUTE_ENDPOINT", raising=False)
    assert main(["explain", "2xold"]) == 0
    out, err = capsys.readouterr()
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in out and "cluster 2xold is no longer in the configuration" in err
    assert "quota" not in out.lower()  # no pools of it whose quotas to read
    assert main(["explain", "2xnever"]) == 1  # a name nothing had: as before
    assert "no job, array or cluster named" in capsys.readouterr().err
