"""Shared fixtures: one embedded Postgres per test run, a migrated template database, and one database
per test worker made from it and emptied between tests (tests.reused_db), so each test starts from what
the migrations put there."""

from __future__ import annotations

import atexit
import gc
import itertools
import os
import shutil
import tempfile
import weakref
from pathlib import Path

import pytest

from zen.core.clock import ManualClock
from zen.core.config import load_config
from zen.store.db import Database, parse_database_url
from zen.store.migrate import migrate

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = "zen_template"
# This process's temporary files in a folder of its own (removed at exit): the agents' default work_dir is
# ``<tmp>/zen-agent``, and a run interrupted while an agent kept a final report (zen.agent.journal) left it there
# for the next runs' test agents (all "vm-test") to publish first, for a day.
tempfile.tempdir = tempfile.mkdtemp(prefix="zen-tests-")
atexit.register(shutil.rmtree, tempfile.tempdir, True)
_counter = itertools.count()
_relays: weakref.WeakSet = weakref.WeakSet()  # every OutboxRelay a test built (its own Zen(...)s too)


def _recorded(init):
    def __init__(relay, *args, **kwargs):
        init(relay, *args, **kwargs)
        _relays.add(relay)
    return __init__


def _settle_relays() -> None:
    """Before a test's database goes: whatever its relays handed over is settled and marked, so no
    mark timer fires later against a dropped database (and logs into a closed capture stream)."""
    for relay in list(_relays):
        with relay.request():  # leaving last, it waits for what was handed over outside a request
            pass
        relay.marks.flush()
    _relays.clear()


from zen.jobs.messaging import OutboxRelay

OutboxRelay.__init__ = _recorded(OutboxRelay.__init__)


# The test files that take longest, longest first (seconds of their tests on 2 cores, 2026-12-05, four
# workers: 106, 99, 64, 47, 46, 45, 43, 38, 33, 32, 28, 27, 22, 22, 21, 21, 20, 19, 19, 18, 16, 15; every other
# file under 15). 2026-12-06, two workers, the files alone: the slow heartbeat path's fault run 48-59 (62 before its
# job ended on a file), the hung agent's 36-50 (44), the disk share's 13-20 (43), the fork share's 11-20 (26); of the
# agent tests, the restarted agent resuming its upload 34-38 in all (46), its integration tests 30-39, the gang
# claims 20-21 (26), the power-offs after reports 17-24 each (the higher ones on a machine busy with another run).
# `make test` hands whole files to its workers in collection order (pytest-xdist's loadfile with
# --no-loadscope-reorder; by default it orders files by how many tests they hold, so these, a few tests each, came
# last and the run waited on them alone): given first, no long file starts near the end.
LONGEST_FIRST = (
    "tests/e2e/test_gang_stack.py", "tests/e2e/test_local_stack.py", "tests/faults/test_slow_heartbeat_path.py",
    "tests/agent/test_restarted_agent_resumes_upload.py", "tests/faults/test_drained_vm_claims.py",
    "tests/faults/test_hung_agent.py", "tests/test_usercli_frictions.py", "tests/agent/test_checkpoint_end.py",
    "tests/agent/test_agent_integration.py", "tests/e2e/test_stack_restart.py", "tests/console/test_console_browser.py",
    "tests/test_cli_deployed_messages.py", "tests/agent/test_gang_claims.py", "tests/e2e/test_notify_stack.py",
    "tests/test_types.py", "tests/terraform/test_terraform.py", "tests/agent/test_container_ends_named.py",
    "tests/faults/test_disk_share.py", "tests/e2e/test_provisioning_stack.py", "tests/agent/test_job_output.py",
    "tests/agent/test_checkpoint_link.py", "tests/agent/test_power_off_reports_other_attempts.py",
    "tests/agent/test_restarted_agent_powers_off_after_reporting.py", "tests/e2e/test_submit_while_stack_starts.py",
    "tests/faults/test_fork_share.py", "tests/agent/test_checkpoint_integration.py", "tests/test_property_delivery.py",
)


@pytest.hookimpl(wrapper=True)
def pytest_collection():
    """No garbage collection while a process collects, and what collection built (every test module, the
    libraries they import, the items) frozen after it, as a function instance freezes what its startup built
    (functions/main.py): each worker collects every test module, its heap growing to some 435,000 objects, and
    each full collection walked them all, during collection and after, at every later one and at the end of the
    run (pytest's own collections). Collecting the whole suite took 6.6-7.7 s of CPU, 3.9-4.3 s so (2 cores,
    2026-12-07). What the tests build is collected as before; what is frozen lives as long as the process anyway."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.enable()
        gc.collect()
        gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (``LONGEST_FIRST``), every other in collection order after them."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test that ran a local stack (the ``home`` fixture) reports its logs' last lines."""
    report = yield
    home = getattr(item, "funcargs", {}).get("home")
    if report.failed and isinstance(home, Path) and home.exists():
        from tests.stack_support import log_tails

        report.sections.append(("the local stack's logs", log_tails(home)))
    return report


@pytest.fixture(autouse=True)
def _environ_kept():
    """The environment as it was before the test, after it: ``zen``'s in-process commands point the clients at a
    local stack they find by setting its variables (``zen.cli.main._use_local_stack``), which outlived the test,
    so a stack running in the checkout (``zen local up``) reached the tests after it (the job's user was the
    stack's identity)."""
    before = dict(os.environ)
    yield
    if os.environ != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    """``zen submit`` records the job_ids it published lately in ``$XDG_CACHE_HOME/zen`` (``zen.cli.submitted``):
    each test has its own, so one test's submissions never look in flight to another's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True)
def _vm_proof_off(request, monkeypatch):
    """Zen requires each heartbeat's proof unless told ``ZEN_VM_PROOF=off`` (``zen.adapters.vm_proof``). The
    suite's Zens hear from made-up VMs that hold no identity token, so they are told off here; the
    proof's tests set it back (or unset it), and the local stacks (marked e2e) keep the developer's
    environment: required, as ``zen local up``."""
    if request.node.get_closest_marker("e2e") is None:
        monkeypatch.setenv("ZEN_VM_PROOF", "off")


@pytest.fixture(autouse=True)
def _as_function_roles(monkeypatch):
    """``ZEN_TEST_AS_ROLES=1``: each Zen entry point runs its statements as its function's database role
    (migration 0030; tests/role_support.py), so the function tests check the roles' grants."""
    if os.environ.get("ZEN_TEST_AS_ROLES") != "1":
        yield
        return
    from tests.role_support import install

    refused = install(monkeypatch)
    yield
    assert refused == [], "statements refused to a function's role (the test may have passed anyway)"


@pytest.fixture(scope="session")
def pg_server():
    from zen_dev.embedded import server_url, start_server

    # Unix socket paths are limited to ~100 bytes: keep the data directory short.
    data_dir = tempfile.mkdtemp(prefix="zpg", dir="/tmp")
    server = start_server(data_dir, cleanup_mode="stop")
    target = parse_database_url(server_url(server))
    admin = target.connect()
    # Thrown away after the run: no commit, checkpoint or CREATE DATABASE waits for the disk (a crash of
    # the machine could corrupt it; the run is then lost anyway). Five Postgres-bound files alone: 51-65 s
    # -> 43-48 s (docs/how-to/test.md).
    for setting in ("fsync", "synchronous_commit", "full_page_writes"):
        admin.run(f"ALTER SYSTEM SET {setting} = off")
    admin.run("SELECT pg_reload_conf()")
    admin.close()
    yield target
    server.cleanup()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(pg_server):
    admin = Database.from_target(pg_server)
    with admin.session() as session:
        session.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
        session.execute(f"CREATE DATABASE {TEMPLATE}")
    admin.close()
    template = Database.from_target(pg_server.with_database(TEMPLATE))
    migrate(template)
    template.close()
    return TEMPLATE


@pytest.fixture(scope="session")
def _reused_db(pg_server, template_db):
    """This worker's database (tests.reused_db): made from the template once, emptied after each test."""
    from tests.reused_db import ReusedDatabase

    database = ReusedDatabase(pg_server, template_db, f"t{os.getpid()}")
    yield database
    database.drop()


@pytest.fixture
def db_target(_reused_db):
    """A migrated database holding only what the migrations put there, for this test alone; yields its
    ConnectionTarget. Emptied afterwards (its other connections ended first), or made again from the
    template where the test changed more than rows (tests.reused_db)."""
    yield _reused_db.target
    _settle_relays()
    _reused_db.reset()


@pytest.fixture
def empty_db(pg_server):
    """A database of its own with no schema at all (a first deploy, a migration's test); yields its
    ConnectionTarget."""
    name = f"empty_{os.getpid()}_{next(_counter)}"
    admin = Database.from_target(pg_server)
    with admin.session() as session:
        session.execute(f"CREATE DATABASE {name}")
    yield pg_server.with_database(name)
    with admin.session() as session:
        session.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.close()


@pytest.fixture
def db_url(db_target):
    """The per-test database as a ZEN_DATABASE_URL (unix-socket form)."""
    return db_target.url()


@pytest.fixture
def db(db_target):
    database = Database.from_target(db_target)
    yield database
    _settle_relays()  # the relays that mark through this Database (the ``zen`` fixture's) while it is open
    database.close()


@pytest.fixture(scope="session")
def pubsub_server():
    """One Pub/Sub stand-in per test run; each test uses its own project, so topics never mix."""
    from zen_dev.local.environment import overridden_environ
    from zen_dev.local.pubsub import PubSubStandIn

    server = PubSubStandIn().start()
    with overridden_environ({"PUBSUB_EMULATOR_HOST": server.address}):
        yield server
    server.stop()


@pytest.fixture(scope="session")
def pubsub_clients(pubsub_server):
    from google.cloud import pubsub_v1

    return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()


# What `zen` has imported once it has published a job or read the database (about 0.4-0.7 s of CPU a command, 2 cores,
# 2026-12-07): imported once by each test worker's ``cli_forks``.
CLI_WARM = ("zen.cli.main", "zen.cli.kit", "zen.store.db", "google.cloud.pubsub_v1")


@pytest.fixture(scope="session")
def cli_forks():
    """`zen ARGS` as a user runs it, a process of its own with its own environment and directory, forked from one
    process per test worker that imported the CLI's libraries once: ``cli_forks.run("zen.cli.main", args, env,
    cwd, timeout_s)`` answers as ``subprocess.run(..., capture_output=True, text=True)`` (``WarmForks.run``)."""
    from zen_dev.local.functions_server import WarmForks

    with WarmForks(CLI_WARM) as forks:
        yield forks


@pytest.fixture(scope="session")
def stack_forks():
    """One process per test worker that imported a local stack's libraries once (``STACK_WARM``): each test's stack
    forks its stand-ins, functions, console and bridge from it (``LocalStack(forks=stack_forks)``)."""
    from zen_dev.local.functions_server import STACK_WARM, WarmForks

    with WarmForks(STACK_WARM) as forks:
        yield forks


@pytest.fixture
def project():
    return f"test-{os.getpid()}-{next(_counter)}"


@pytest.fixture
def config(project):
    return load_config().model_copy(update={"project": project})


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def publisher(config, pubsub_clients):
    """Zen publishes through the official client to the Pub/Sub stand-in (see pubsub_support)."""
    from tests.pubsub_support import StandInPublisher

    return StandInPublisher(config, *pubsub_clients)


@pytest.fixture
def zen(config, db, publisher, clock):
    from zen.app import Zen

    return Zen(config, db, publisher, clock)  # its relay is settled before its Database closes (db)


@pytest.fixture
def functions(zen, db_url, monkeypatch):
    """The four entry points under functions-framework, wired to this test's ``zen``."""
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return FunctionsInvoker(zen)


@pytest.fixture
def zen_and_fn(zen, functions):
    """This test's Zen and its functions under functions-framework, as a pair."""
    return zen, functions


@pytest.fixture
def no_database(tmp_path, monkeypatch):
    """No database configured, and a fresh ZEN_HOME as the working directory (read commands must say
    so rather than start or create one); returns that directory."""
    monkeypatch.delenv("ZEN_DATABASE_URL", raising=False)
    monkeypatch.delenv("ZEN_CLOUDSQL_INSTANCE", raising=False)
    monkeypatch.setenv("ZEN_HOME", str(tmp_path / ".zen"))
    monkeypatch.chdir(tmp_path)
    return tmp_path
