"""``--since`` with a date its offset puts outside years 1-9999 in UTC (0001-01-01T00:00+01:00 is 31 December of
year 0 there) is a usage error naming the flag, as a date that is none is: it was taken, and the database's driver
failed on it ("zen: DataRejected: a value cannot be sent to the database (OverflowError: date value out of
range)"), not saying which value of the command was wrong."""

from __future__ import annotations

import pytest

from zen.cli.main import main


@pytest.mark.parametrize("argv", [
    ["jobs", "list", "--since", "0001-01-01T00:00:00+01:00"],
    ["jobs", "list", "--since", "9999-12-31T23:59:59-01:00"],
    ["usage", "--since", "0001-01-01T00:00:00+01:00"],
], ids=["list before year 1", "list after 9999", "usage before year 1"])
def test_a_since_outside_the_years_utc_has_is_a_usage_error(argv, db_url, monkeypatch, capsys):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "--since" in err and "DataRejected" not in err, err
