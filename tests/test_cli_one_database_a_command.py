"""A command's reads share one database and its connection (``zen.cli.kit.read``): `zen submit` of a chosen job_id
reads the stops kept for it, the job and the arrays under it, each on a connection of its own (on Cloud SQL each costs
the connector's handshake), and against a database that never answers it waited out the connection's timeout once
for each read. Now it connects once, and once it could not, publishes without asking again (the function decides,
as when the database cannot be read)."""

from __future__ import annotations

import pytest

from tests.test_cli_deployed_messages import silent_server
from tests.test_usercli_frictions import zen_cli  # noqa: F401 (fixture)


@pytest.fixture
def silent_database():
    """A TCP port that accepts connections and never says a word: (its URL, the connections it accepted)."""
    with silent_server() as found:
        yield found


def test_a_submit_connects_once_to_a_database_that_never_answers_and_publishes(zen_cli, silent_database,  # noqa: F811
                                                                                publisher):
    url, accepted = silent_database
    result = zen_cli("submit", "--job-id", "exp-1", "--cluster", "1xl4", "--", "true", ZEN_DATABASE_URL=url)
    assert result.returncode == 0, result.stderr
    assert "(if job_id exp-1 is new: the database could not be read to check)" in result.stdout, result.stdout
    assert len(accepted) == 1, f"{len(accepted)} connections for one submission"

