"""Each core function's database user in terraform (sql.tf, functions.tf, outputs.tf): its own IAM user,
the one its connection settings name, made a member of its function's role alone by db_grants_sql
(migration 0030 makes the roles); db_grants_sql's block run on the real Postgres, as an upgrade from the
grants a deployment before 0030 has."""

from __future__ import annotations

import os
import re

import pytest

from tests.role_support import ROLES
from tests.terraform.hcl import Module, block
from zen.store.db import Database
from zen.store.migrate import MIGRATIONS_DIR

# What db_grants_sql gave each function's user itself before migration 0030 (every table, and those to come).
BEFORE_0030 = [
    'GRANT USAGE ON SCHEMA public TO "{user}"',
    'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{user}"',
    'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO "{user}"',
    'ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "{user}"',
    'ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO "{user}"',
]


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


def function_block(module: Module, role: str, user: str) -> str:
    """db_grants_sql's statement for one function's user, rendered for ``role`` and ``user``."""
    grants = module.outputs["db_grants_sql"]["value"]
    [parts] = re.findall(r'\[for key, user in google_sql_user\.functions : join\(" ", \[(.*?)\]\)\]', grants)
    pieces = [p.replace('\\"', '"') for p in re.findall(r'"((?:[^"\\]|\\.)*)"', parts)]
    text = " ".join(pieces)
    assert text.count("${") == text.count("${user.name}") + 1, text  # nothing else to fill in
    return text.replace("${local.functions[key].db_role}", role).replace("${user.name}", user)


def test_each_function_has_its_own_user_and_role(module):
    functions = module.locals["functions"]
    assert {name: f["db_role"] for name, f in functions.items()} == ROLES
    migration = (MIGRATIONS_DIR / "0030_function_roles.sql").read_text()
    for role in ROLES.values():
        assert f"CREATE ROLE {role} NOLOGIN" in migration
    users = module.resources_of("google_sql_user")["functions"]
    assert users["type"] == "CLOUD_IAM_SERVICE_ACCOUNT"
    assert users["for_each"] == "${google_service_account.function}"  # one per function's own account
    accounts = module.resources_of("google_service_account")["function"]
    assert accounts["for_each"] == "${local.functions}"
    service = block(module.resources_of("google_cloudfunctions2_function")["zen"]["service_config"])
    assert "ZEN_DB_USER = google_sql_user.functions[each.key].name" in service["environment_variables"]
    grants = module.outputs["db_grants_sql"]["value"]
    assert "GRANT ${local.functions[key].db_role} TO" in grants
    assert "ON ALL TABLES IN SCHEMA public TO" not in grants.replace("SELECT ON ALL TABLES IN SCHEMA public TO zen_reader", "")


def _direct(session, user: str) -> dict:
    tables = session.sql("SELECT count(*) AS n FROM information_schema.role_table_grants WHERE grantee = :u", u=user)
    defaults = session.sql("SELECT count(*) AS n FROM pg_default_acl d, aclexplode(d.defaclacl) a "
                           "WHERE a.grantee = to_regrole(:u)", u=f'"{user}"')
    member_of = session.sql("SELECT r.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid "
                            "WHERE m.member = to_regrole(:u) ORDER BY r.rolname", u=f'"{user}"')
    return {"tables": tables[0]["n"], "defaults": defaults[0]["n"], "member_of": [r["rolname"] for r in member_of]}


def test_db_grants_sql_makes_each_user_a_member_of_its_role_alone(module, db, db_target):
    """Upgraded from the grants before 0030: run twice (it is run again after adding readers), each user
    holds no privilege of its own, only its role's; a missing role (not migrated yet) changes nothing."""
    users = {role: f"zen-{role}-{os.getpid()}@project.iam" for role in ROLES.values()}
    stranded = f"zen-stranded-{os.getpid()}@project.iam"
    with db.session() as session:
        for user in [*users.values(), stranded]:
            session.execute(f'CREATE ROLE "{user}" LOGIN')
            for statement in BEFORE_0030:
                session.execute(statement.format(user=user))
    try:
        with db.session() as session:
            for _ in range(2):
                for role, user in users.items():
                    session.execute(function_block(module, role, user))
            for role, user in users.items():
                assert _direct(session, user) == {"tables": 0, "defaults": 0, "member_of": [role]}
            with pytest.raises(Exception, match="does not exist"):
                session.execute(function_block(module, "zen_not_migrated", stranded))
            kept = _direct(session, stranded)
            assert kept["tables"] > 0 and kept["defaults"] > 0 and kept["member_of"] == []
        as_heartbeat = Database.from_target(db_target.__class__(**{**db_target.__dict__,
                                                                   "user": users["zen_heartbeat"]}))
        try:
            with as_heartbeat.session() as session:
                assert session.sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0
                with pytest.raises(Exception, match="permission denied"):
                    session.execute("DELETE FROM jobs")
        finally:
            as_heartbeat.close()
    finally:
        with db.session() as session:
            for user in [*users.values(), stranded]:
                session.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :u", u=user)
                session.execute(f'DROP OWNED BY "{user}"')
                session.execute(f'DROP ROLE "{user}"')
