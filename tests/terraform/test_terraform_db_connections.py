"""The functions' database connections fit Cloud SQL's max_connections (sql.tf): each function gets
ZEN_DB_MAX_OPEN = what one request holds at once x concurrency + 1 (the outbox marks' thread), and the
plan fails when every instance at that bound, plus the reserved few, exceeds db_max_connections.

What one request holds is measured here, through the four functions over a real Postgres (a
submission that scales, the tick, heartbeats, a stop), against the numbers terraform multiplies; the
rule itself is evaluated by ``terraform console`` where the binary is installed."""

from __future__ import annotations

import collections
import json
import re
import shutil
import threading
from pathlib import Path

import pytest

from tests.messages import heartbeat, job_request
from tests.terraform.hcl import TERRAFORM, Module, block, console, top_block


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


class HeldPerThread:
    """Wraps a Database: how many connections each thread holds at once, at most."""

    def __init__(self, db):
        self._lock = threading.Lock()
        self._held: collections.Counter = collections.Counter()
        self.peak: collections.Counter = collections.Counter()
        self.others_peak = 0  # connections held at once by all threads but the caller's
        self._caller = threading.get_ident()
        acquire, release = db._acquire, db._release

        def counted_acquire():
            conn = acquire()
            with self._lock:
                me = threading.get_ident()
                self._held[me] += 1
                self.peak[me] = max(self.peak[me], self._held[me])
                others = sum(n for t, n in self._held.items() if t != self._caller)
                self.others_peak = max(self.others_peak, others)
            return conn

        def counted_release(conn, broken):
            with self._lock:
                self._held[threading.get_ident()] -= 1
            release(conn, broken)

        db._acquire, db._release = counted_acquire, counted_release

    def request(self, call) -> int:
        """Run one function call on this thread; the most connections it held at once."""
        self.peak[self._caller] = 0
        call()
        return self.peak[self._caller]


@pytest.fixture
def held(config, db, publisher, clock):
    from tests.scaling.fakes import RecordingMig
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker
    from zen.scaling.manager import ClusterOrchestrator

    calls: list = []
    scaler = ClusterOrchestrator(config, db, clock, lambda project, region, name, model: RecordingMig(region, calls))
    zen = Zen(config, db, publisher, clock, scaler=scaler)
    counter = HeldPerThread(db)
    yield counter, FunctionsInvoker(zen)
    zen.relay.marks.flush()


def test_what_one_request_holds_is_what_terraform_multiplies(module, held):
    counter, fn = held
    per_request = module.locals["db_connections_per_request"]
    measured = {
        "on_job_submitted": counter.request(lambda: fn.submit(job_request("a"))),  # new demand: it scales
        "on_heartbeat": max(counter.request(lambda: fn.heartbeat(beat)) for beat in (
            heartbeat("a", "CLAIMED", 1), heartbeat("a", "RUNNING", 2), heartbeat("a", "SUCCEEDED", 3, exit_code=0),
            {"kind": "vm", "vm": "vm-a", "cluster": "4xa100-40gb", "region": "us-central1", "zone": "us-central1-a",
             "state": "IDLE", "seq": 4, "sent_at": "2026-01-01T00:00:00Z"})),  # a VM became usable: it scales
        "on_stop_requested": counter.request(lambda: fn.stop({"job_id": "a", "reason": "done"})),
        "on_scale_tick": counter.request(fn.tick),
    }
    assert measured == per_request
    # Besides the requests, one thread marks published outbox rows: the "+ 1" of ZEN_DB_MAX_OPEN.
    assert counter.others_peak <= 1


def test_each_function_is_bounded_by_its_share(module):
    env = block(module.resources_of("google_cloudfunctions2_function")["zen"]["service_config"])["environment_variables"]
    assert re.search(r"\bZEN_DB_MAX_OPEN\s*=\s*tostring\(local\.db_max_open\[each\.key\]\)", env), env
    assert module.locals["db_max_open"] == (
        "${{for name, f in var.functions : name => local.db_connections_per_request[name] * f.concurrency + 1}}")
    assert set(module.locals["db_connections_per_request"]) == set(module.variables["functions"]["default"])


def needed(functions: dict, per_request: dict) -> int:
    return sum(f["max_instances"] * (per_request[name] * f["concurrency"] + 1) for name, f in functions.items())


def test_the_default_functions_fit_the_default_database_with_room(module):
    functions = module.variables["functions"]["default"]
    per_request = module.locals["db_connections_per_request"]
    reserved = module.locals["db_connections_reserved"]
    limit = module.variables["db_max_connections"]["default"]
    assert needed(functions, per_request) == 85  # variables.tf shows the sum
    assert needed(functions, per_request) + reserved <= limit
    assert reserved >= 3 + 3  # superuser_reserved_connections, and a few people at once
    # The former default (10 heartbeat instances) did not fit.
    assert needed({**functions, "on_heartbeat": {"max_instances": 10, "concurrency": 4}}, per_request) + reserved > limit
    description = module.variables["functions"]["description"]
    assert "at most one" not in description and "ZEN_DB_MAX_OPEN" in description


def test_the_plan_checks_the_connections_against_the_database(module):
    preconditions = block(module.resources_of("google_sql_database_instance")["zen"]["lifecycle"])["precondition"]
    [precondition] = [p for p in preconditions if "db_connections_needed" in p["condition"]]
    assert precondition["condition"] == \
        "${local.db_connections_needed + local.db_connections_reserved <= var.db_max_connections}"
    assert module.locals["db_connections_needed"] == \
        "${sum([for name, f in var.functions : f.max_instances * local.db_max_open[name]])}"
    message = precondition["error_message"]
    for hint in ("max_instances", "concurrency", "db_tier", "db_max_connections", "${local.db_connections_needed}"):
        assert hint in message, hint


def evaluated(directory, expression: str, tfvars: str) -> list:
    """``expression`` (a list) as ``terraform console`` evaluates it over the module in ``directory`` and ``tfvars``."""
    (directory / "test.tfvars").write_text(tfvars)
    result = console(directory, f"jsonencode({expression})", "test.tfvars")
    assert result.returncode == 0, result.stderr
    return json.loads(json.loads(result.stdout.strip().splitlines()[-1]))


def sql_locals(directory: Path, heading: str, variable: str) -> None:
    """A module in ``directory`` of sql.tf's locals block that opens with the comment ``heading``, beside the
    declarations of ``variable`` (variables.tf) and ``db_max_connections`` it reads."""
    sql = (TERRAFORM / "sql.tf").read_text()
    found = re.search(r"^locals \{\n  # " + re.escape(heading) + r".*?^\}\n", sql, re.S | re.M).group(0)
    (directory / "main.tf").write_text("\n".join([
        top_block(TERRAFORM / "variables.tf", variable),
        top_block(TERRAFORM / "monitoring_variables.tf", 'variable "db_max_connections" {'),
        found]))


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_terraform_evaluates_the_rule_as_described(module, tmp_path):
    """The locals and the precondition's condition of sql.tf, evaluated by terraform itself over the
    declared variables: the defaults pass; ten heartbeat instances, or a db-g1-small's 50, do not."""
    sql_locals(tmp_path, "What one request holds", 'variable "functions" {')
    condition = block(module.resources_of("google_sql_database_instance")["zen"]["lifecycle"])["precondition"][0]
    condition = condition["condition"][2:-1]

    def evaluate(tfvars: str = "") -> list:
        return evaluated(tmp_path, f"[local.db_connections_needed, local.db_max_open, {condition}]", tfvars)

    assert evaluate() == [85, {"on_job_submitted": 9, "on_heartbeat": 9, "on_stop_requested": 3,
                               "on_scale_tick": 4}, True]
    heartbeats = """functions = {
      on_job_submitted  = { max_instances = 5, concurrency = 4 }
      on_heartbeat      = { max_instances = 10, concurrency = 4 }
      on_stop_requested = { max_instances = 3, concurrency = 2 }
      on_scale_tick     = { max_instances = 1, concurrency = 1 }
    }"""
    assert evaluate(heartbeats)[0::2] == [148, False]
    assert evaluate("db_max_connections = 50")[2] is False


def test_the_plan_checks_db_max_connections_against_the_tier(module):
    preconditions = block(module.resources_of("google_sql_database_instance")["zen"]["lifecycle"])["precondition"]
    conditions = [p["condition"] for p in preconditions]
    assert ("${var.db_max_connections <= coalesce(local.db_tier_max_connections, var.db_max_connections)}"
            in conditions), conditions


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_terraform_reads_each_tiers_connection_limit(tmp_path):
    """sql.tf's tier locals, evaluated by terraform: a db_max_connections above what the tier's memory gets (Cloud SQL's
    default max_connections) is caught, as db-g1-small's 50 under the default 100 was not."""
    sql_locals(tmp_path, "What the instance allows", 'variable "db_tier" {')
    condition = "var.db_max_connections <= coalesce(local.db_tier_max_connections, var.db_max_connections)"

    def evaluate(tfvars: str = "") -> list:
        return evaluated(tmp_path, f"[local.db_tier_max_connections, {condition}]", tfvars)

    assert evaluate() == [100, True]  # db-custom-1-3840: 3.75 GiB
    assert evaluate('db_tier = "db-g1-small"') == [50, False]
    assert evaluate('db_tier = "db-g1-small"\ndb_max_connections = 50') == [50, True]
    assert evaluate('db_tier = "db-f1-micro"\ndb_max_connections = 25') == [25, True]
    assert evaluate('db_tier = "db-custom-2-7680"\ndb_max_connections = 400') == [400, True]
    assert evaluate('db_tier = "db-custom-2-6144"\ndb_max_connections = 400') == [200, False]
    assert evaluate('db_tier = "db-custom-16-122880"\ndb_max_connections = 1000') == [1000, True]
    assert evaluate('db_tier = "db-perf-optimized-N-2"') == [None, True]  # not read here: no check
