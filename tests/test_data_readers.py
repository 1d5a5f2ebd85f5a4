"""Who may name bound data in a job (``data_clearance``'s ``readers``), with ZEN_AUTH=required (the functions under
functions-framework, tokens signed by the local Compute stand-in's issuer as tests/test_submitters.py signs them).

The agent stages a job's inputs with its VM's account and hands them to the job: naming data is reading it. A binding
with ``readers`` keeps its prefix to them and Zen's admins; without, whoever may submit may name it (its VMs alone
read it), as before. Refused, the job is rejected with the rule's name and nothing is published."""

from __future__ import annotations

import json

import pytest

from tests.test_data_clearance import configured
from tests.test_queues import with_queues
from tests.test_submitters import ALICE, AUTH, BOB, QUEUES, a100s, refusals, send, sign  # noqa: F401  (sign: fixture)
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from zen.core.errors import ConfigError
from zen.store import repository

BOUND = "gs://genomics-private/cohort-7/"


def _zen(config, db, publisher, clock, certs, monkeypatch, readers):
    from zen.app import Zen

    monkeypatch.setenv("ZEN_AUTH", "required")
    monkeypatch.setenv("ZEN_AUTH_CERTS_URL", certs.url)
    binding = [{"prefix": "gs://genomics-private", "tags": ["hipaa"], **({"readers": readers} if readers else {})}]
    return Zen(with_queues(configured(config, binding), QUEUES, auth=AUTH), db, publisher, clock)


@pytest.fixture
def zen(config, db, publisher, clock, certs, monkeypatch):
    zen = _zen(config, db, publisher, clock, certs, monkeypatch, [ALICE])
    yield zen
    zen.relay.marks.flush()


def _stored(zen, job_id: str):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def test_bound_data_is_named_by_its_readers_alone(functions, zen, sign, publisher):
    """Bob may submit to research, and the binding's readers are Alice: his job naming the data is refused, hers runs."""
    assert send(functions, "on_job_submitted", {**a100s("b1", BOB), "inputs": [{"uri": BOUND}]}, sign(BOB)) == 200
    assert _stored(zen, "b1") is None
    assert any("may not name data under gs://genomics-private/" in why and "readers" in why for _, why in refusals(zen))
    assert not any(json.loads(m.data)["job_id"] == "b1" for m in publisher.on("zen-job-start"))
    assert send(functions, "on_job_submitted", {**a100s("b2", BOB), "outputs": "gs://genomics-private/out/"},
                sign(BOB)) == 200  # writing there is naming it too
    assert _stored(zen, "b2") is None
    assert send(functions, "on_job_submitted", {**a100s("a1", ALICE), "inputs": [{"uri": BOUND}]}, sign(ALICE)) == 200
    assert _stored(zen, "a1").status.value == "QUEUED"


def test_readers_are_principal_patterns_checked_at_load(config):
    with pytest.raises((ConfigError, ValueError), match=r"data_clearance\[0\] \(gs://genomics-private/\): readers: "):
        configured(config, [{"prefix": "gs://genomics-private", "tags": ["hipaa"], "readers": ["group:nobody"]}])
