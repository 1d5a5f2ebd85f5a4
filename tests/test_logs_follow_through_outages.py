"""`zen logs -f` and `zen submit --wait` run for hours on a laptop: the Wi-Fi changes, Cloud SQL restarts for its
maintenance, the lid closes for an hour and the access token expires meanwhile. A read that fails then is waited
out (``follow.PATIENCE_S``): the follow goes on where it was, printing each line once, and still exits with the
job's code when the job ended while it could not read.

Made real: the follow's Postgres backend ended by ``pg_terminate_backend``, the database out of reach for a few
polls, and Google's token endpoint (a local server, the credentials' token_uri) not answering while the token
has expired, under the official Cloud Logging client against the local stand-in."""

from __future__ import annotations

import io
import threading
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from tests.logging_standin import LoggingStandIn
from tests.messages import agent_run, job_request
from tests.test_logs_follow_unknown_id import Ticking
from tests.token_endpoint import TokenEndpoint
from zen.adapters import cloud_logging as joblogs_cloud
from zen.adapters.joblogs import OutputEntry
from zen.cli.follow import JobStatusSource, follow
from zen.core.models import JobStatus
from zen.store.connect import ConnectionTarget
from zen.store.db import Database


def lines(attempt: int, first: int, last: int, *, final: bool = False) -> list[OutputEntry]:
    start = datetime.now(timezone.utc) - timedelta(minutes=5)
    made = [OutputEntry("j", attempt, "stdout", "vm-a", seq, (start + timedelta(milliseconds=seq)).isoformat(),
                        f"line {seq}") for seq in range(first, last + 1)]
    if final:
        made.append(OutputEntry("j", attempt, "zen", "vm-a", last + 1, (start + timedelta(seconds=1)).isoformat(),
                                "[zen] end", final=True))
    return made


def test_an_expired_token_not_refreshed_while_offline_is_waited_out(monkeypatch):
    """It ended the follow: `zen: could not reach Google to check your credentials (...)`, exit 1, the job running."""
    from google.cloud import logging as cloud_logging
    from google.oauth2.credentials import Credentials

    monkeypatch.setattr(joblogs_cloud, "REQUEST_INTERVAL_S", 0, raising=False)
    down = [False]  # while True: the connection closed unanswered (offline); else a token that expires at once
    token = TokenEndpoint(lambda: None if down[0] else (200, {"access_token": "t", "expires_in": 1,
                                                               "token_type": "Bearer"}))
    try:
        with LoggingStandIn() as cloud:
            sink = joblogs_cloud.CloudSink(joblogs_cloud.logging_client("p", cloud.endpoint), "p", {"zone": "z"})
            sink.write(lines(1, 1, 3))
            user = Credentials(token=None, refresh_token="r", token_uri=token.uri, client_id="c", client_secret="s")
            client = cloud_logging.Client(project="p", credentials=user, _use_grpc=False,
                                          client_options={"api_endpoint": f"http://{cloud.endpoint}"})
            polls = [0]

            class Job:
                def job(self, job_id):
                    polls[0] += 1
                    down[0] = 2 <= polls[0] <= 4  # offline, the token expired: its refresh fails
                    if polls[0] == 3:
                        sink.write(lines(1, 4, 6, final=True))  # the job ends meanwhile
                    ended = polls[0] >= 4
                    return SimpleNamespace(status=JobStatus.FAILED if ended else JobStatus.RUNNING, attempt=1,
                                           nodes=1, vm="vm-a", started_at=1, exit_code=3 if ended else None,
                                           request_hash=None)

                def rejection(self, job_id, message_id=None):
                    return None

            out, err = io.StringIO(), io.StringIO()
            code = follow("j", joblogs_cloud.CloudReader(client, "p"), Job(), style="raw", out=out, err=err,
                          poll_s=0.0, settle_s=30.0, clock=Ticking())
    finally:
        token.close()
    assert code == 3, err.getvalue()
    assert out.getvalue().splitlines() == [f"line {n}" for n in range(1, 7)] + ["[zen] end"]
    assert "zen: cannot read job j now" in err.getvalue() and "j FAILED" in err.getvalue(), err.getvalue()


def reached_at_will(db_target) -> tuple[Database, list[int]]:
    """A database whose next ``failing[0]`` connections fail to open (out of reach: a Wi-Fi change, an instance not
    back from its maintenance), the later ones open; and that count, for the test to set."""
    away = ConnectionTarget(db_target.user, db_target.database, unix_sock="/nonexistent/.s.PGSQL.5432")
    failing = [0]

    def connect():
        failing[0] -= 1
        return (away if failing[0] >= 0 else db_target).connect()

    return Database(connect), failing


def test_a_database_connection_ended_and_then_out_of_reach_as_the_job_ends(functions, zen, db_target):
    """The follow's backend is ended (a Cloud SQL maintenance), then the database cannot be reached for a few polls
    during which the job ends: the follow goes on, prints every line once and exits with the job's code."""
    functions.submit(job_request("j"))
    beats = agent_run("j", final="FAILED", exit_code=7)
    for beat in beats[:-1]:
        functions.heartbeat(beat)
    followed, failing = reached_at_will(db_target)

    def end_its_backend() -> None:  # the connection the follow's reads reuse, from the pool
        with followed.transaction() as txn:
            pid = txn.sql("SELECT pg_backend_pid() AS pid")[0]["pid"]
        with zen.db.transaction() as txn:
            txn.sql("SELECT pg_terminate_backend(:pid)", pid=pid)

    polls = [0]
    written = lines(1, 1, 3, final=True)

    class Output:
        def new_entries(self, job_id, attempt=None):
            polls[0] += 1
            if polls[0] in (2, 4):
                end_its_backend()
            if polls[0] == 4:
                failing[0] = 3
                functions.heartbeat(beats[-1])  # the job ends while the follow cannot read its row
            return [written[polls[0] - 1]] if polls[0] <= len(written) else []

    out, err = io.StringIO(), io.StringIO()
    try:
        code = follow("j", Output(), JobStatusSource(followed), style="raw", out=out, err=err, poll_s=0.0,
                      settle_s=30.0, clock=Ticking())
    finally:
        followed.close()
    assert code == 7, err.getvalue()
    assert out.getvalue().splitlines() == [f"line {n}" for n in range(1, 4)] + ["[zen] end"], out.getvalue()
    said = err.getvalue()
    assert said.count("zen: cannot read job j now") == 1 and "Traceback" not in said, said
    assert said.rstrip().endswith("j FAILED (attempt 1)"), said


def test_a_status_read_on_a_link_gone_silent_is_given_up_on(functions, zen, db_url, monkeypatch):
    """A connection whose other end stops answering with no reset (a Wi-Fi change, a NAT that forgot it during a
    sleep; here its backend stopped with SIGSTOP) held `zen logs -f` in its read until TCP gave up (some 15 minutes on
    Linux): the follow's database gives a read up after ``READ_TIMEOUT_S`` and reads through a new connection."""
    import os
    import signal

    from zen.cli import follow as follow_module

    monkeypatch.setattr(follow_module, "READ_TIMEOUT_S", 2.0)
    monkeypatch.delenv("ZEN_CLOUDSQL_INSTANCE", raising=False)
    monkeypatch.delenv("ZEN_DB_QUERY_TIMEOUT_S", raising=False)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    functions.submit(job_request("j"))
    beats = agent_run("j", final="FAILED", exit_code=7)
    for beat in beats[:-1]:
        functions.heartbeat(beat)
    status = JobStatusSource()
    stopped: list[int] = []
    polls = [0]
    written = lines(1, 1, 2, final=True)

    class Output:
        def new_entries(self, job_id, attempt=None):
            polls[0] += 1
            if polls[0] == 2:
                with status._db.transaction() as txn:  # the connection the follow's reads reuse
                    stopped.append(txn.sql("SELECT pg_backend_pid() AS pid")[0]["pid"])
                os.kill(stopped[0], signal.SIGSTOP)
                functions.heartbeat(beats[-1])
            return [written[polls[0] - 1]] if polls[0] <= len(written) else []

    out, err, ended = io.StringIO(), io.StringIO(), []
    thread = threading.Thread(target=lambda: ended.append(follow(
        "j", Output(), status, style="raw", out=out, err=err, poll_s=0.0, settle_s=30.0, clock=Ticking())), daemon=True)
    try:
        thread.start()
        thread.join(30)  # stopped Postgres backends answer nothing: the read must give up within this
        assert ended == [7], f"still reading after 30 s: {err.getvalue()}"
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        thread.join(30)
        status._db.close()
    assert out.getvalue().splitlines() == ["line 1", "line 2", "[zen] end"], out.getvalue()
