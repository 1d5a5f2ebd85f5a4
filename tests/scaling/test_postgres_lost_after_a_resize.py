"""Postgres goes away right after Compute accepted a resize, before the pass records what it did: the next pass
(Postgres back) asks for no VM again (it reads the MIG's target size, which counts the resize)."""

from __future__ import annotations

import contextlib

import pytest

from tests.messages import job_request
from zen.adapters.compute import MigManager, compute_clients_from_env
from zen.app import Zen
from zen.scaling.manager import ClusterOrchestrator
from zen.store.db import Database
from zen_dev.local.compute import ComputeStandIn, ManualClock as CloudClock
from zen_dev.local.invoke import FunctionsInvoker

CLUSTER = "4xa100-40gb"


@contextlib.contextmanager
def postgres_down(pg_server, database: str):
    """Every connection to ``database`` ended and new ones refused, as when Postgres restarts."""
    admin = pg_server.connect()
    try:
        admin.run(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS false')
        admin.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d AND pid <> pg_backend_pid()",
                  d=database)
        yield
    finally:
        admin.run(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS true')
        admin.close()


def build(config, db, publisher, clock, monkeypatch, tmp_path, on_resize=None):
    scenario = {"project": config.project, "seed": 2, "capacity": {"default": 4},
                "timings": {"boot": {"dist": "fixed", "s": 60}, "retry_interval_s": 30, "delete_s": 0}}
    standin = ComputeStandIn(scenario, clock=CloudClock(), config=config, log_dir=tmp_path).start()
    monkeypatch.setenv("ZEN_COMPUTE_ENDPOINT", standin.endpoint)
    clients = compute_clients_from_env()

    class Mig(MigManager):
        def resize(self, size, together=()):
            super().resize(size, together)
            if on_resize is not None:
                on_resize(self.region, size)

    scaler = ClusterOrchestrator(config, db, clock, lambda p, r, n, model: Mig(p, r, n, *clients))
    zen = Zen(config, db, publisher, clock, scaler=scaler)

    def sizes():
        return {r: MigManager(config.project, r, config.cluster(CLUSTER).mig_name(r), *clients).target_size()
                for r in config.cluster(CLUSTER).regions}

    return zen, standin, sizes


def _run(config, db, publisher, clock, monkeypatch, tmp_path, pg_server, db_target, fail: bool):
    down: list = []

    def on_resize(region, size):
        if fail and not down:  # Postgres goes away right after the first resize Compute accepted
            cm = postgres_down(pg_server, db_target.database)
            cm.__enter__()
            down.append(cm)

    zen, standin, sizes = build(config, db, publisher, clock, monkeypatch, tmp_path, on_resize)
    try:
        fn = FunctionsInvoker(zen)
        fn.submit(job_request("a"))  # committed, then its pass resizes (and, with ``fail``, Postgres drops)
        after_submit = sizes()
        for cm in down:
            cm.__exit__(None, None, None)
        for _ in range(3):
            clock.advance(15)
            standin.advance(15)
            fn.tick()
        return after_submit, sizes()
    finally:
        standin.stop()


@pytest.mark.parametrize("fail", [False, True])
def test_a_resize_whose_record_was_lost_is_not_asked_again(config, db, publisher, clock, monkeypatch, tmp_path,
                                                          pg_server, db_target, fail):
    after_submit, after_ticks = _run(config, db, publisher, clock, monkeypatch, tmp_path, pg_server, db_target, fail)
    assert sum(after_ticks.values()) <= 2, (after_submit, after_ticks)
