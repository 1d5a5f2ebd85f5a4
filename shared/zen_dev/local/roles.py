"""The local stack's core functions log in to Postgres as deployed ones do: each as a user that is a member
of its function's role alone (migration 0030; terraform: db_grants_sql makes each function's IAM user one),
so a statement a role lacks the grant for fails here first, not after a deploy. The notifier and the
console keep the stack's own user (deployed, the notifier's user is granted its tables directly and the
console's is a zen_reader)."""

from __future__ import annotations

import dataclasses

from zen.store.db import Database, parse_database_url

# Each core entry point (functions/main.py) and its role; terraform's local.functions (db_role) says the same.
FUNCTION_ROLES = {
    "on_job_submitted": "zen_submitter",
    "on_heartbeat": "zen_heartbeat",
    "on_stop_requested": "zen_stopper",
    "on_scale_tick": "zen_ticker",
}


def function_logins(url: str) -> dict[str, str]:
    """A login user per core function (``<role>_local``, a member of its role alone: made once, kept
    with the embedded server's data), on the migrated database at ``url``; entry point -> its
    ZEN_DATABASE_URL. The embedded server trusts its unix socket: no passwords."""
    target = parse_database_url(url)
    db = Database.from_target(target)
    try:
        with db.session() as session:
            for role in FUNCTION_ROLES.values():
                session.execute(f"DO $$ BEGIN CREATE ROLE {role}_local LOGIN; "
                                "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
                session.execute(f"GRANT {role} TO {role}_local")
    finally:
        db.close()
    return {name: dataclasses.replace(target, user=f"{role}_local").url() for name, role in FUNCTION_ROLES.items()}
