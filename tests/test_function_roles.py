"""The four core functions' database roles (migration 0030), on the real Postgres: the catalog holds
exactly the grant matrix below (and the security page's table says the same), each function's code runs
logged in as a member of its role alone, and what a role has no business doing is refused."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.messages import heartbeat, job_request
from tests.role_support import ROLES, PerFunction, login_as, note_refusals
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, build_stack, vm_beat
from zen.app import Zen
from zen.core.prices import Price, PriceTable
from zen.store.db import Database

ROOT = Path(__file__).resolve().parent.parent
SUB, BEAT, STOP, TICK = "zen_submitter", "zen_heartbeat", "zen_stopper", "zen_ticker"
ALL = (SUB, BEAT, STOP, TICK)
SCALING = (SUB, BEAT, TICK)  # the functions that run scaling passes (terraform: ZEN_SCALING)
LIFECYCLE = ("status, attempt, max_attempts, vm, region, zone, last_seq, last_heartbeat_at, queued_at, started_at, "
             "finished_at, exit_code, message, start_published_at, preempted_by, preemptions, start_regions, "
             "widen_at, start_vms, regions, hold, hold_until, retries, gang, updated_at, stop_reason, left_vms, heard_at, "
             "fence_timeout_s")  # (fence_timeout_s: migration 0067)
VM_REPORT = ("cluster, region, zone, state, job_id, attempt, jobs, cached_inputs, images, last_seq, last_seen_at, "
             "idle_since, retired_created_at")  # (retired_created_at: migration 0064)


def _grants(*pairs) -> dict[str, str]:
    """(roles, privileges) pairs, later ones adding to earlier ones: role -> "P, P(cols), ..."."""
    out: dict[str, list[str]] = {}
    for roles, privileges in pairs:
        for role in roles:
            out.setdefault(role, []).append(privileges)
    return {role: ", ".join(parts) for role, parts in out.items()}


# Every table and sequence of the schema, and what each role may do with it (nothing: absent). A table a
# later migration adds must be listed here, with its grants made in that migration.
MATRIX: dict[str, dict[str, str]] = {
    "schema_migrations": _grants((ALL, "SELECT")),
    "jobs": _grants((ALL, f"SELECT, UPDATE ({LIFECYCLE})"), ((SUB,), "INSERT")),
    "job_events": _grants((ALL, "INSERT"), ((BEAT, TICK), "SELECT")),
    "job_events_id_seq": _grants((ALL, "USAGE")),
    "queue_usage": _grants((ALL, "SELECT, INSERT, UPDATE (gpu_seconds, updated_at)")),
    "rejected_messages": _grants(((SUB, STOP), "INSERT, SELECT (id)"), ((BEAT,), "INSERT, SELECT (id, source, repeat_key, at, last_at, count), UPDATE (count, last_at)"),
                                 ((TICK,), "SELECT (id, at, last_at), DELETE")),
    "rejected_messages_id_seq": _grants(((SUB, BEAT, STOP), "USAGE")),
    "outbox": _grants(((SUB, BEAT, STOP), "INSERT, SELECT (id, publish_attempts)"), ((TICK,), "SELECT, INSERT, DELETE"),
                      (ALL, "UPDATE (sent_at, publish_attempts, last_error)")),
    "outbox_id_seq": _grants((ALL, "USAGE")),
    "early_stops": _grants(((SUB, BEAT, STOP, TICK), "SELECT, DELETE"), ((STOP,), "INSERT")),  # BEAT: 0046
    "attempt_usage": _grants(((BEAT,), "SELECT, INSERT, UPDATE (outcome, vm_share)"),
                             ((TICK,), "INSERT, SELECT (job_id, attempt), UPDATE (vm_share)")),
    "vms": _grants((ALL, "SELECT"), ((BEAT,), f"INSERT, UPDATE ({VM_REPORT})"), (SCALING, "DELETE")),
    "scaling_memory": _grants((ALL, "SELECT"), (SCALING, "INSERT, UPDATE (memory, updated_at)"), ((TICK,), "DELETE")),
    "vm_drains": _grants((ALL, "SELECT"), (SCALING, "INSERT, DELETE")),
    "mig_instances": _grants((SCALING, "SELECT, INSERT, UPDATE (last_seen_at, running_at, billed_before, model, usd_per_hour), DELETE")),
    "vm_lifetimes": _grants((SCALING, "INSERT, SELECT (name, first_seen_at)"), ((BEAT, TICK), "SELECT (model, billed_before, running_at, usd_per_hour, left_at)"),
                             ((TICK,), "SELECT (cluster, region, last_seen_at)")),
    "scaling_decisions": _grants((SCALING, "INSERT")),
    "scaling_decisions_id_seq": _grants((SCALING, "USAGE")),
    "scaling_pass_asks": _grants((SCALING, "SELECT, INSERT, UPDATE (asks)")),
    "unplanned_request_failures": _grants((SCALING, "SELECT, DELETE"), ((TICK,), "INSERT")),
    "unplanned_request_failures_id_seq": _grants(((TICK,), "USAGE")),
    "tick_clock": _grants((SCALING, "SELECT"), ((TICK,), "INSERT, UPDATE (last_at, interval_s, back_at, probe_nonce, "
                                                         "probe_sent_at, probe_heard_at, probe_vouched_at, "
                                                         "probe_prev_nonce, probe_prev_sent_at)"),
                          ((BEAT,), "UPDATE (probe_heard_at, probe_seen, back_at, probe_vouched_at, probe_prev_nonce, "
                                    "probe_prev_sent_at, delivery_lag_s, delivery_lag_at)")),
    "vm_prices": _grants((SCALING, "SELECT"), ((TICK,), "INSERT, UPDATE (usd_per_hour, fetched_at)")),
    "vm_price_refresh": _grants(((TICK,), "SELECT, UPDATE (tried_at, refreshed_at, error)")),
    "notifications": {},  # the notifier's alone (terraform: db_grants_sql)
    "notification_endpoints": {},  # the notifier's alone (terraform: db_grants_sql)
}


def parse(privileges: str) -> frozenset[str]:
    """"SELECT, UPDATE (a, b)" -> {"SELECT", "UPDATE(a)", "UPDATE(b)"}: one entry per column grant."""
    out = set()
    for kind, columns in re.findall(r"([A-Z]+)(?: \(([^)]*)\))?", privileges):
        out.update({f"{kind}({c.strip()})" for c in columns.split(",")} if columns else {kind})
    return frozenset(out)


def catalog(session) -> dict[str, dict[str, frozenset[str]]]:
    """What the catalog grants the four roles: relation -> role -> privileges (as ``parse`` gives them)."""
    rows = session.sql("""
        SELECT c.relname AS rel, r.rolname AS role, a.privilege_type AS kind, NULL AS col
        FROM pg_class c, aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee
        WHERE c.relnamespace = 'public'::regnamespace AND r.rolname LIKE 'zen\\_%'
        UNION ALL
        SELECT c.relname, r.rolname, a.privilege_type, att.attname
        FROM pg_attribute att JOIN pg_class c ON c.oid = att.attrelid, aclexplode(att.attacl) a
             JOIN pg_roles r ON r.oid = a.grantee
        WHERE c.relnamespace = 'public'::regnamespace AND r.rolname LIKE 'zen\\_%'""")
    found: dict[str, dict[str, set[str]]] = {}
    for row in rows:
        if row["role"] in ALL:
            entry = row["kind"] if row["col"] is None else f"{row['kind']}({row['col']})"
            found.setdefault(row["rel"], {}).setdefault(row["role"], set()).add(entry)
    return {rel: {role: frozenset(p) for role, p in roles.items()} for rel, roles in found.items()}


def test_the_catalog_grants_the_four_roles_exactly_the_matrix(db):
    with db.session() as session:
        granted = catalog(session)
        relations = {r["relname"] for r in session.sql(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'S')")}
        roles = {r["rolname"]: r for r in session.sql(
            "SELECT rolname, rolcanlogin, rolsuper, rolinherit FROM pg_roles WHERE rolname = ANY(:names)",
            names=list(ALL))}
    assert set(MATRIX) == relations, "a table or sequence with no decision here (or one gone)"
    expected = {rel: {role: parse(p) for role, p in by_role.items()} for rel, by_role in MATRIX.items() if by_role}
    assert granted == expected
    assert sorted(roles) == sorted(ALL)
    assert not any(r["rolcanlogin"] or r["rolsuper"] for r in roles.values())  # group roles: members log in


def test_the_security_page_shows_the_matrix():
    """docs/explanations/security.md's table: per table, each role's privileges (column lists left out)."""
    text = (ROOT / "docs" / "explanations" / "security.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \|(.*)\|\s*$", text, flags=re.M)
    shown = {table: [cell.strip() for cell in cells.split("|")] for table, cells in rows}
    for table, by_role in MATRIX.items():
        if table.endswith("_seq"):
            continue
        words = [" ".join(sorted({p.split("(")[0] for p in parse(by_role.get(role, ""))})) for role in ALL]
        cells = [" ".join(sorted(set(re.sub(r"\([^)]*\)", "", cell).replace(",", " ").split()) - {"—"}))
                 for cell in shown[table]]
        assert cells == words, table


def _fetch_prices(now):
    return PriceTable({("a2-highgpu-4g", "us-west1", "standard"): Price(14.0, "catalog", now)})


class _Controls:
    """The tick's control subscriptions (zen.adapters.control_subscriptions): made for every MIG instance
    the passes listed, which the tick reads from the database."""

    def __init__(self):
        self.seen: list = []

    def ensure(self, instances, gone=None, left=None) -> int:
        self.seen.append(list(instances))
        self.gone = list(gone()) if gone is not None else None  # (read under the tick's role)
        self.left = set(left([name for name, _, _ in self.gone or []] + ["zen-nobody"])) if left is not None else None
        return 0


@pytest.fixture
def per_function(config, db, db_target, publisher, clock, monkeypatch, tmp_path):
    """The functions as deployed, each its own Zen over its own pool, logged in as a member of its role
    alone (the stop without scaling, as terraform sets ZEN_SCALING), against a Compute stand-in."""
    from contextlib import ExitStack

    from zen.scaling.manager import ClusterOrchestrator

    admin_zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    migs = admin_zen.scaler._mig_factory
    controls = _Controls()
    with ExitStack() as stack:
        zens, pools = {}, []
        for method, role in ROLES.items():
            target = stack.enter_context(login_as(db, db_target, role, f"{role}_fn_{os.getpid()}"))
            pool = Database.from_target(target)
            pools.append(pool)
            scaler = None if role == STOP else ClusterOrchestrator(config, pool, clock, migs)
            extra = {"price_fetch": _fetch_prices, "controls": controls} if role == TICK else {}
            zens[method] = Zen(config, pool, publisher, clock, scaler=scaler, **extra)
        try:
            yield PerFunction(zens), admin_zen, advance, instances, controls
        finally:
            for zen in zens.values():
                zen.relay.marks.flush()
            for pool in pools:
                pool.close()
            standin.stop()


def _statuses(db):
    with db.transaction() as session:
        return {r["job_id"]: r["status"] for r in session.sql("SELECT job_id, status FROM jobs")}


def test_each_function_runs_as_its_own_role(per_function, db, clock, monkeypatch, caplog):
    """Submissions, scaling passes (a stockout, boots, scale-down), claims, runs, stops early and late,
    refusals, the tick's sweeps, resend, prices and pruning: each function as its role alone."""
    from zen_dev.local.invoke import FunctionsInvoker

    zens, admin, advance, instances, controls = per_function
    denied = note_refusals(monkeypatch)  # a scaling pass or a price refresh that fails is only logged
    fn = FunctionsInvoker(zens)
    fn.stop({"job_id": "early", "reason": "not needed"})  # before its submission: remembered
    fn.submit(job_request("early"))
    fn.submit(job_request("a"))  # the pass: us-central1 is stocked out, us-west1 asked
    fn.submit(job_request("b"))
    fn.submit(job_request("gone"))
    fn.stop({"job_id": "gone"})  # QUEUED: cancelled at once
    for target in ("on_job_submitted", "on_heartbeat", "on_stop_requested"):
        assert fn.send(target, b"not json").status_code == 200  # refused, recorded
    advance(60)
    fn.tick()
    advance(BOOT_S + 1)
    west = instances("us-west1")
    assert len(west) == 2 and all(i.running for i in west)
    for seq, vm in enumerate(west, start=1):
        fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", seq, sent_at=clock().isoformat()))
    fn.tick()
    done, stopped = west
    fn.heartbeat(heartbeat("a", "CLAIMED", 1, vm=done.name, region="us-west1", zone=done.zone))
    fn.heartbeat(heartbeat("a", "RUNNING", 2, vm=done.name, region="us-west1", zone=done.zone))
    fn.heartbeat(heartbeat("a", "SUCCEEDED", 3, vm=done.name, region="us-west1", zone=done.zone, exit_code=0))
    fn.heartbeat(heartbeat("b", "CLAIMED", 1, vm=stopped.name, region="us-west1", zone=stopped.zone))
    fn.heartbeat(heartbeat("b", "RUNNING", 2, vm=stopped.name, region="us-west1", zone=stopped.zone))
    fn.stop({"job_id": "b"})  # RUNNING: the VM is told, and its answer ends the attempt
    fn.heartbeat(heartbeat("b", "STOPPED", 3, vm=stopped.name, region="us-west1", zone=stopped.zone))
    for vm in west:
        fn.heartbeat(vm_beat(vm.name, "us-west1", "IDLE", 100, sent_at=clock().isoformat()))
    with db.transaction() as session:  # a pool the configuration dropped since a pass remembered it
        session.sql("INSERT INTO scaling_memory (cluster, region, memory, updated_at) "
                    "VALUES ('4xa100-40gb', 'asia-east1', '{}', now())")
    advance(admin.config.deadlines.idle_timeout_s + 1)
    fn.tick()  # idle VMs drained and deleted; the dropped pool's memory forgotten
    advance(60)
    fn.tick()  # and forgotten once gone from their MIG
    assert instances("us-west1") == []
    with db.transaction() as session:
        assert session.sql("SELECT region FROM scaling_memory WHERE region = 'asia-east1'") == []
    assert _statuses(db) == {"early": "CANCELLED", "a": "SUCCEEDED", "b": "CANCELLED", "gone": "CANCELLED"}
    for zen in zens.zens.values():
        zen.relay.marks.flush()  # the marks thread of each function, as its role
    with db.transaction() as session:
        usage = session.sql("SELECT job_id, outcome FROM attempt_usage ORDER BY job_id")
        refused = session.sql("SELECT source, reason FROM rejected_messages ORDER BY source")
        unsent = session.sql("SELECT count(*) AS n FROM outbox WHERE sent_at IS NULL")[0]["n"]
        prices = session.sql("SELECT usd_per_hour FROM vm_prices")
        lifetimes = session.sql("SELECT count(*) AS n FROM vm_lifetimes")[0]["n"]
    assert [(u["job_id"], u["outcome"]) for u in usage] == [("a", "SUCCEEDED"), ("b", "STOPPED")]
    assert sorted(r["source"] for r in refused if "not valid UTF-8 JSON" in r["reason"]) == [
        "zen-heartbeats", "zen-job-stop", "zen-job-submitted"]
    assert any("the stop is kept" in r["reason"] for r in refused)  # the early stop, noted
    assert unsent == 0 and [p["usd_per_hour"] for p in prices] == [14.0]
    assert lifetimes >= 2 and controls.seen and controls.gone is not None and controls.left is not None  # (read as the tick)
    assert denied == [] and not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


def _refused(target, statement: str) -> bool:
    pool = Database.from_target(target)
    try:
        with pool.transaction() as session:
            session.execute(statement)
    except Exception as exc:  # noqa: BLE001 - the message says which
        if "permission denied" in str(exc):
            return True
        raise
    finally:
        pool.close()
    return False


# What each role has no business doing (issue 34), and statements of the same tables it does run.
FORBIDDEN = {
    BEAT: ["DELETE FROM jobs", "UPDATE jobs SET priority = 9", "UPDATE jobs SET user_id = 'mallory'",
           "DELETE FROM job_events", "UPDATE queue_usage SET queue = 'other'", "DELETE FROM queue_usage",
           "INSERT INTO jobs (job_id) VALUES ('x')", "UPDATE tick_clock SET last_at = now()",
           "SELECT data FROM outbox", "DELETE FROM outbox", "INSERT INTO early_stops (job_id) VALUES ('x')",
           "DELETE FROM rejected_messages", "SELECT * FROM notifications", "UPDATE vm_prices SET usd_per_hour = 0",
           "SELECT payload FROM rejected_messages"],
    SUB: ["UPDATE attempt_usage SET outcome = 'SUCCEEDED'", "INSERT INTO attempt_usage (job_id) VALUES ('x')",
          "SELECT * FROM attempt_usage", "UPDATE jobs SET request = '{}'", "UPDATE jobs SET queue = 'other'",
          "DELETE FROM jobs", "UPDATE queue_usage SET queue = 'other'", "INSERT INTO vms (name) VALUES ('x')", "UPDATE vms SET state = 'IDLE'",
          "INSERT INTO early_stops (job_id) VALUES ('x')", "UPDATE tick_clock SET last_at = now()",
          "DELETE FROM rejected_messages", "SELECT data FROM outbox", "SELECT payload FROM rejected_messages",
          "UPDATE rejected_messages SET count = 0", "SELECT * FROM job_events"],
    STOP: ["INSERT INTO jobs (job_id) VALUES ('x')", "DELETE FROM jobs", "SELECT * FROM attempt_usage",
           "DELETE FROM vms", "INSERT INTO vm_drains (name) VALUES ('x')", "SELECT * FROM mig_instances",
           "INSERT INTO scaling_decisions (reason) VALUES ('x')", "SELECT * FROM tick_clock",
           "SELECT data FROM outbox", "DELETE FROM rejected_messages", "SELECT * FROM job_events"],
    TICK: ["INSERT INTO jobs (job_id) VALUES ('x')", "DELETE FROM jobs", "UPDATE jobs SET user_id = 'mallory'",
           "DELETE FROM job_events", "UPDATE attempt_usage SET outcome = 'SUCCEEDED'",
           "INSERT INTO vms (name) VALUES ('x')", "UPDATE vms SET state = 'IDLE'",
           "INSERT INTO early_stops (job_id) VALUES ('x')", "DELETE FROM attempt_usage",
           "SELECT * FROM notifications", "SELECT payload FROM rejected_messages",
           "INSERT INTO rejected_messages (reason) VALUES ('x')", "SELECT outcome FROM attempt_usage"],
}
ALLOWED = {
    BEAT: ["UPDATE jobs SET status = status WHERE false", "UPDATE attempt_usage SET outcome = outcome WHERE false",
           "DELETE FROM early_stops WHERE false"],  # a claim applies a stop kept for its job (0046)
    SUB: ["INSERT INTO jobs (job_id) SELECT job_id FROM jobs WHERE false", "DELETE FROM early_stops WHERE false"],
    STOP: ["INSERT INTO early_stops SELECT * FROM early_stops WHERE false", "UPDATE jobs SET status = status WHERE false"],
    TICK: ["SELECT data FROM outbox", "DELETE FROM outbox WHERE false", "DELETE FROM rejected_messages WHERE false"],
}


@pytest.mark.parametrize("role", ALL)
def test_a_role_is_refused_what_its_function_never_does(role, db, db_target):
    with login_as(db, db_target, role, f"{role}_probe_{os.getpid()}") as target:
        assert [s for s in FORBIDDEN[role] if not _refused(target, s)] == []
        assert [s for s in ALLOWED[role] if _refused(target, s)] == []



def test_the_local_stack_logs_in_each_function_as_a_member_of_its_role(db, db_target):
    """zen_dev.local.roles: the URLs the local stack gives its four lifecycle functions (twice: a stack
    started again on the same data keeps its users)."""
    from zen.store.db import parse_database_url
    from zen_dev.local.roles import function_logins

    function_logins(db_target.url())
    urls = function_logins(db_target.url())
    try:
        assert sorted(urls) == sorted(ROLES)
        for name, url in urls.items():
            target = parse_database_url(url)
            assert target.user == f"{ROLES[name]}_local" and target.database == db_target.database
            pool = Database.from_target(target)
            try:
                with pool.session() as session:
                    roles = session.sql("SELECT r.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid "
                                        "WHERE m.member = to_regrole(current_user)")
                    assert [r["rolname"] for r in roles] == [ROLES[name]]
            finally:
                pool.close()
            assert _refused(target, "DELETE FROM jobs")
    finally:
        with db.session() as session:
            for role in ROLES.values():
                session.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :u", u=f"{role}_local")
                session.execute(f"DROP ROLE {role}_local")
