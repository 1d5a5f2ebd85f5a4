"""One migrated database per test worker, emptied between tests instead of made anew.

A database made from the migrated template copies its 8 MB through Postgres' write-ahead log: 55-150 ms
of the server's CPU a test, some 10% of the suite's CPU on 2 cores (measured 2026-12-01). Emptying the
same database costs about 5 ms: every other connection to it ended (as ``DROP DATABASE ... WITH (FORCE)``
ends them), every table's rows deleted and the template's own rows put back (the applied migrations, the
price refresh's row). Sequences go on counting, as in a database that lives long, so a leftover write by
id from one test cannot reach a row of the next. A test that changed the schema, a grant or the database's
settings leaves a schema that no longer reads as the template's (``SHAPE``), and one whose connections
still come back after they are ended (a pool that connects again) would write into the next test: the
database is then dropped and made again from the template under a new name, so no test sees another's
changes."""

from __future__ import annotations

import time
from contextlib import closing

import pg8000.native

from zen.store.db import ConnectionTarget

# Everything a test could change besides rows, read as one digest: relations and their columns (types,
# defaults, column grants), constraints, triggers, functions, schemas, table grants and the database's own
# settings. Equal to the template's: only rows differ.
SHAPE = """
SELECT md5(string_agg(item, ',' ORDER BY item)) FROM (
  SELECT concat_ws(':', n.nspname, c.relname, c.relkind, c.relacl::text, a.attname,
                   format_type(a.atttypid, a.atttypmod), a.attnotnull::text, a.attacl::text,
                   pg_get_expr(d.adbin, d.adrelid)) AS item
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  UNION ALL SELECT concat_ws(':', 'constraint', conrelid::regclass::text, conname, pg_get_constraintdef(oid))
    FROM pg_constraint WHERE connamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL SELECT concat_ws(':', 'trigger', tgrelid::regclass::text, tgname, tgenabled) FROM pg_trigger
   WHERE NOT tgisinternal
  UNION ALL SELECT concat_ws(':', 'function', proname, md5(prosrc), proacl::text) FROM pg_proc
   WHERE pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL SELECT concat_ws(':', 'schema', nspname, nspacl::text) FROM pg_namespace
  UNION ALL SELECT concat_ws(':', 'database', datallowconn::text, datconnlimit::text, datacl::text)
    FROM pg_database WHERE datname = current_database()
) AS shape
"""
TABLES = """SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables
             WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1"""


def _connect(target: ConnectionTarget, database: str) -> pg8000.native.Connection:
    return target.with_database(database).connect()


class ReusedDatabase:
    """``name``, made from ``template`` on the server ``server`` (a superuser's target) and handed to one
    test after another; :meth:`reset` after each."""

    def __init__(self, server: ConnectionTarget, template: str, name: str):
        self.server, self.template, self.base, self.name, self.remade = server, template, name, name, 0
        self.admin = _connect(server, "postgres")
        with closing(_connect(server, template)) as source:
            self.shape = source.run(SHAPE)[0][0]
            self.tables = [row[0] for row in source.run(TABLES)]
            self.seeded = {}  # table -> (columns, rows): what the migrations put there
            for table in self.tables:
                rows = source.run(f"SELECT * FROM {table}")
                if rows:
                    self.seeded[table] = ([column["name"] for column in source.columns], rows)
        self.keeper: pg8000.native.Connection | None = None
        self._make()

    @property
    def target(self) -> ConnectionTarget:
        return self.server.with_database(self.name)

    def _make(self) -> None:
        self.admin.run(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
        self.admin.run(f"CREATE DATABASE {self.name} TEMPLATE {self.template}")
        self.keeper = _connect(self.server, self.name)
        self._refill: dict[str, pg8000.native.PreparedStatement] = {}  # table -> its rows' insert, on this keeper

    def _end_others(self, timeout_s: float = 2.0) -> bool:
        """End every other client's connection to the database (not the autovacuum's), again until none
        is left (a pool may connect again): a test's leftover connection must not write after the rows are
        deleted. False when connections still come after ``timeout_s``."""
        others = "FROM pg_stat_activity WHERE datname = :d AND pid <> :me AND backend_type = 'client backend'"
        mine = self.keeper.run("SELECT pg_backend_pid()")[0][0]
        deadline = time.monotonic() + timeout_s
        while self.admin.run(f"SELECT count(*) {others}", d=self.name, me=mine)[0][0]:
            if time.monotonic() > deadline:
                return False
            self.admin.run(f"SELECT pg_terminate_backend(pid) {others}", d=self.name, me=mine)
            time.sleep(0.01)
        return True

    def reset(self) -> None:
        """The database as the template has it, for the next test."""
        try:
            same = self._end_others() and self.keeper.run(SHAPE)[0][0] == self.shape
        except pg8000.native.Error:  # the keeper ended too (a test ended every connection)
            same = False
        if not same:  # dropped (its connections ended), and made again under a new name, which a
            self.close()  # leftover pool connecting again cannot reach
            self.admin.run(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
            self.remade += 1
            self.name = f"{self.base}_{self.remade}"
            self._make()
            return
        keeper = self.keeper
        # One round trip empties every table (no foreign-key checks meanwhile), one a seeded table fills it again
        # (its statement prepared once on the keeper): 20-odd tables and 50-odd seeded rows each a round trip of
        # their own took some 30 ms a test.
        keeper.run("BEGIN; SET LOCAL session_replication_role = replica; "
                   + "; ".join(f"DELETE FROM {table}" for table in self.tables))
        for table, (columns, rows) in self.seeded.items():
            if table not in self._refill:
                names = ", ".join(f'"{c}"' for c in columns)
                values = ", ".join("(" + ", ".join(f":p{r}_{c}" for c in range(len(columns))) + ")"
                                   for r in range(len(rows)))
                self._refill[table] = keeper.prepare(f"INSERT INTO {table} ({names}) VALUES {values}")
            self._refill[table].run(**{f"p{r}_{c}": v for r, row in enumerate(rows) for c, v in enumerate(row)})
        keeper.run("COMMIT")

    def close(self) -> None:
        if self.keeper is not None:
            try:
                self.keeper.close()
            except Exception:  # already ended by the server
                pass
            self.keeper = None

    def drop(self) -> None:
        self.close()
        self.admin.run(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
        self.admin.close()

