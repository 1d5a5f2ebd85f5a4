"""`zen watch` left open for hours: a refresh the database cannot answer (Cloud SQL's maintenance ended the
connection and the instance is not back yet, a Wi-Fi change) ended the watch with `zen: cannot reach the database`,
exit 1. Once a frame was shown, such a refresh is said on stderr and tried again at the next interval; a database
not reached for the first frame still fails at once (tests/test_usercli.py). Made real: the watch's Postgres backend
ended by ``pg_terminate_backend`` and its next connections refused."""

from __future__ import annotations

import io
from types import SimpleNamespace

from tests.messages import job_request
from tests.test_logs_follow_through_outages import reached_at_will
from zen.cli import watch
from zen.store.db import Database


def test_a_refresh_the_database_cannot_answer_is_tried_again(functions, zen, db_target, monkeypatch):
    functions.submit(job_request("job-1"))
    watched, failing = reached_at_will(db_target)
    naps: list[float] = []

    def nap(seconds):  # after the first frame the database goes away for two refreshes; the sixth nap is Ctrl-C
        naps.append(seconds)
        if len(naps) == 1:
            with watched.transaction() as txn:
                pid = txn.sql("SELECT pg_backend_pid() AS pid")[0]["pid"]
            with zen.db.transaction() as txn:
                txn.sql("SELECT pg_terminate_backend(:pid)", pid=pid)
            failing[0] = 2
        if len(naps) == 6:
            raise KeyboardInterrupt

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(watch.time, "sleep", nap)
    monkeypatch.setattr(watch.sys, "stdout", out)
    monkeypatch.setattr(watch.sys, "stderr", err)
    assert watch.cmd_watch(SimpleNamespace(once=False, interval=0.5), lambda: watched) == 0
    assert out.getvalue().count("VMs per region") == 4 and "job-1" in out.getvalue(), out.getvalue()
    said = err.getvalue().splitlines()
    assert len(said) == 2 and all(line.startswith("zen: cannot read the database now (") for line in said), said


def test_a_refresh_on_a_link_gone_silent_is_given_up_on(db_target, monkeypatch):
    """A connection whose other end stops answering with no reset (a Wi-Fi change; here its backend stopped with
    SIGSTOP) froze the screen until TCP gave up (some 15 minutes): the refresh is given up after ``READ_TIMEOUT_S``
    and made on a new connection."""
    import os
    import signal
    import threading

    monkeypatch.setattr(watch, "READ_TIMEOUT_S", 2.0)
    watched = Database.from_target(db_target)
    stopped: list[int] = []
    naps: list[float] = []

    def nap(seconds):  # after the first frame its connection's backend stops; the third nap is Ctrl-C
        naps.append(seconds)
        if len(naps) == 1:
            with watched.transaction() as txn:
                stopped.append(txn.sql("SELECT pg_backend_pid() AS pid")[0]["pid"])
            os.kill(stopped[0], signal.SIGSTOP)
        if len(naps) == 3:
            raise KeyboardInterrupt

    out, ended = io.StringIO(), []
    monkeypatch.setattr(watch.time, "sleep", nap)
    monkeypatch.setattr(watch.sys, "stdout", out)
    thread = threading.Thread(target=lambda: ended.append(
        watch.cmd_watch(SimpleNamespace(once=False, interval=0.5), lambda: watched)), daemon=True)
    try:
        thread.start()
        thread.join(30)  # stopped Postgres backends answer nothing: the read must give up within this
        assert ended == [0], f"still refreshing after 30 s, {len(naps)} frames shown"
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        thread.join(30)
    assert out.getvalue().count("VMs per region") == 3, out.getvalue()
