"""A clone under a folder whose path holds '+', '&', '#' or a space (~/src/c++/zen, ~/R&D/zen) runs `zen local up`
and `make demo`: the embedded Postgres listens on a socket in <clone>/.zen/pgdata, and its URL put that folder
unescaped after ?host=, which parse_database_url read back as another ('+' a space, '&' and '#' cutting it):
`zen local up` there said only "zen: InterfaceError: communication error"."""

from __future__ import annotations

import pytest

from zen.store.db import ConnectionTarget, parse_database_url


@pytest.mark.parametrize("folder", ["/home/me/c++/zen", "/home/me/R&D/zen", "/home/me/proj#2/zen", "/home/me/a b/zen"])
def test_a_socket_url_reads_back_as_the_same_socket(folder):
    target = ConnectionTarget("postgres", "zen", unix_sock=f"{folder}/.zen/pgdata/.s.PGSQL.5432")
    assert parse_database_url(target.url()).unix_sock == target.unix_sock


def test_the_embedded_database_of_a_clone_under_a_folder_with_a_plus_is_reachable(tmp_path):
    from zen.store.db import Database
    from zen_dev.embedded import embedded_database_url, stop_embedded_server

    home = tmp_path / "c++" / ".zen"  # as `zen local up` makes it in a clone at <tmp>/c++
    home.mkdir(parents=True)
    try:
        url = embedded_database_url(home)  # raised: the socket looked for in "<tmp>/c  /.zen/pgdata"
        db = Database.from_target(parse_database_url(url))
        try:
            with db.transaction() as session:
                assert session.sql("SELECT 1 AS one")[0]["one"] == 1
        finally:
            db.close()
    finally:
        stop_embedded_server(home)
