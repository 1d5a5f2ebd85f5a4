"""The fault suite at a small budget (``make faults`` runs the full one): hostile messages of every
schema and envelope, duplicated and reordered delivery, and a database restart mid-burst, all
through the functions served by functions-framework with 4 concurrent deliveries."""

from __future__ import annotations

import pytest

from tests.faults.checks import BUDGETS, run_all
from tests.faults.harness import FaultStack


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    with FaultStack(threads=4, log_dir=tmp_path_factory.mktemp("fault-logs")) as stack:
        yield {r.name.split(" (")[0]: r for r in run_all(stack, "small", seed=7)}


CHECKS = ["fuzz on_job_submitted", "fuzz on_heartbeat", "fuzz on_stop_requested", "fuzz CloudEvent envelopes",
          "duplicate+reordered delivery", "database restart mid-burst"]


@pytest.mark.parametrize("name", CHECKS)
def test_fault_check_holds(results, name):
    result = results[name]
    assert result.cases == BUDGETS["small"][CHECKS.index(name)] or name.startswith("duplicate"), result.line()
    assert result.ok, result.line()


def test_the_fuzz_reaches_both_outcomes(results):
    """A fuzz that only ever produced rejections (or only accepted messages) would prove little."""
    submits = results["fuzz on_job_submitted"]
    assert 0 < submits.rejected < submits.cases, submits.line()


def test_who_is_asking_refuses_every_hostile_proof_and_applies_the_valid_ones(tmp_path):
    """With ZEN_AUTH=required (tests.faults.auth): each hostile kind refused with its reason, recorded,
    acked, nothing created or stopped; every valid submission applied; no 5xx."""
    from tests.faults.auth import AUTH_BUDGETS, AuthStack, auth_refusals

    with AuthStack(threads=4, log_dir=tmp_path) as auth:
        result = auth_refusals(auth, AUTH_BUDGETS["small"], seed=7)
    assert result.ok and 0 < result.rejected < result.cases, result.line()
