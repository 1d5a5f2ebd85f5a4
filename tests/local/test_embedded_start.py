"""The embedded Postgres starts even when a first ``pg_ctl start`` is ended by a signal before it wrote a
line (a test run saw it die of a segmentation fault, which failed a local stack's test); a start that
fails otherwise is not tried again."""

from __future__ import annotations

import subprocess

import pg8000.native
import pytest

from zen.store.db import parse_database_url
from zen_dev.embedded import _killed_by_signal, embedded_server_url, stop_embedded_server


def _crash_first_start(monkeypatch, returncode: int) -> list[list[str]]:
    """pgserver's ``pg_ctl``, its first ``start`` failing with ``returncode`` (negative: a signal) before it
    runs anything; every other call runs the real command. Returns the starts seen."""
    import pgserver.postgres_server as server_module

    real, starts = server_module.pg_ctl, []

    def pg_ctl(args, **kwargs):
        if "start" in args:
            starts.append(args)
            if len(starts) == 1:
                raise subprocess.CalledProcessError(returncode, ["pg_ctl", *args])
        return real(args, **kwargs)

    monkeypatch.setattr(server_module, "pg_ctl", pg_ctl)
    return starts


def test_a_start_killed_by_a_signal_is_tried_again_and_the_server_answers(tmp_path, monkeypatch):
    starts = _crash_first_start(monkeypatch, -11)
    try:
        target = parse_database_url(embedded_server_url(tmp_path))
        assert len(starts) >= 2  # a real start here may die of a signal too (a bus error once): tried again
        connection = pg8000.native.Connection(user=target.user, unix_sock=target.unix_sock, database="postgres")
        assert connection.run("SELECT 1") == [[1]]
        connection.close()
    finally:
        stop_embedded_server(tmp_path)


def test_a_start_that_fails_with_an_exit_code_is_raised_at_once_and_the_next_call_starts_anew(tmp_path, monkeypatch):
    starts = _crash_first_start(monkeypatch, 1)
    try:
        with pytest.raises((subprocess.CalledProcessError, FileNotFoundError)):
            embedded_server_url(tmp_path)
        assert len(starts) == 1
        embedded_server_url(tmp_path)  # not the failed start's handle, kept by pgserver
        assert len(starts) == 2
    finally:
        stop_embedded_server(tmp_path)


def test_killed_by_signal_reads_the_error_pgserver_raised_while_handling_it():
    crash = subprocess.CalledProcessError(-11, ["pg_ctl", "start"])
    try:
        try:
            raise crash
        except subprocess.CalledProcessError:
            raise FileNotFoundError("pgdata/log")  # pgserver reads the log pg_ctl never wrote
    except FileNotFoundError as raised:
        assert _killed_by_signal(raised)
    assert not _killed_by_signal(subprocess.CalledProcessError(1, ["pg_ctl", "start"]))
    assert not _killed_by_signal(FileNotFoundError("pgdata/log"))
