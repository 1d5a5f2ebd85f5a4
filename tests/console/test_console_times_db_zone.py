"""The console's job page labels its times UTC (the job list's column says "submitted (UTC)"), but its History
table printed each timestamp as the database session handed it over: in Postgres' TimeZone setting. Cloud SQL's
default is UTC, but the embedded Postgres of `zen local up` and the test suite takes the machine's zone at initdb
(or $TZ), and a self-run Postgres may be set to any zone: with TZ=America/St_Johns the history read
'2025-12-31 20:30:00' for '2026-01-01 00:00:00'. Every session asks for UTC now (zen.store.db.SESSION)."""

from __future__ import annotations

import re

import pytest

from tests.console.test_console_app import page, setup  # noqa: F401 (fixture)
from tests.messages import job_request

SET = "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I {}', current_database()); END $$"


@pytest.fixture
def database_in_st_johns(db_target):
    """The test's database set to America/St_Johns (UTC-03:30) for every new session, as a Postgres whose zone is
    that; set back after."""
    admin = db_target.connect()
    admin.run(SET.format("SET TimeZone = ''America/St_Johns''"))
    yield
    admin.run(SET.format("RESET TimeZone"))
    admin.close()


def test_the_job_page_history_is_in_utc_whatever_the_databases_zone(database_in_st_johns, setup):  # noqa: F811
    _, functions, client, _ = setup
    functions.submit(job_request("a1", user_id="alice"))  # at the test clock's now: 2026-01-01 00:00:00 UTC
    history = re.findall(r"<tr><td>(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)</td>", page(client, "/jobs/a1?fragment=1"))
    assert history[0] == "2026-01-01 00:00:00"
