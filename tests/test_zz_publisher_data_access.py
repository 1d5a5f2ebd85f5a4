"""A submitter acting beyond their rights through the agents' Cloud Storage access (ZEN_AUTH=required,
ZEN_VM_PROOF=required; the functions under functions-framework, tokens signed by the local Compute
stand-in's issuer as tests/test_submitters.py signs them).

Whoever may submit names any gs:// URI as ``inputs``: the agent stages it with the VM's account, which holds
every bucket of ``agent_input_buckets`` (and, for cleared clusters, the data_clearance buckets), and hands it
to the job. No rule of the queue, of data_clearance or of the user decides who may name which data (secrets
have one: a queue's ``secrets:``). docs/explanations/security.md says a cleared VM may read all the bound data
of its buckets, "not only its job's (jobs cannot: they have no credentials)": a job does not need
credentials, it names the data and the agent fetches it.

These tests fail today: Bob's jobs, naming data bound to the hipaa group and another user's outputs, are
accepted and their start messages carry those URIs to the VMs."""

from __future__ import annotations

import json

import pytest

from tests.test_data_clearance import configured
from tests.test_queues import with_queues
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from tests.test_submitters import AUTH, BOB, QUEUES, a100s, refusals, send, sign  # noqa: F401  (sign: fixture)
from zen.store import repository


@pytest.fixture
def zen(config, db, publisher, clock, certs, monkeypatch):
    from zen.app import Zen

    monkeypatch.setenv("ZEN_AUTH", "required")
    monkeypatch.setenv("ZEN_VM_PROOF", "required")
    monkeypatch.setenv("ZEN_AUTH_CERTS_URL", certs.url)
    zen = Zen(with_queues(configured(config), QUEUES, auth=AUTH), db, publisher, clock)
    yield zen
    zen.relay.marks.flush()


def started_with(publisher, job_id: str, uri: str) -> bool:
    """Whether a start message of ``job_id`` (what the agent stages from) names ``uri``."""
    return any(json.loads(m.data)["job_id"] == job_id and uri in m.data.decode() for m in publisher.on("zen-job-start"))


def test_a_submitter_cannot_have_data_bound_by_data_clearance_staged_into_their_job(functions, zen, sign, publisher):
    """Bob may submit to research, and nobody granted him gs://genomics-private/: his job naming it should be
    refused (a rule saying who may name which data, as a queue's secrets: says for secrets)."""
    request = {**a100s("b1", BOB), "inputs": [{"uri": "gs://genomics-private/cohort-7/"}]}
    assert send(functions, "on_job_submitted", request, sign(BOB)) == 200
    with zen.db.transaction() as session:
        job = repository.get_job(session, "b1")
    assert job is None, (f"Bob's job naming gs://genomics-private/ was accepted as {job.status.value} (requires_tags "
                         f"{job.request.get('requires_tags')}); its start names the data: "
                         f"{started_with(publisher, 'b1', 'gs://genomics-private/cohort-7/')}")
    assert any("genomics-private" in why for _, why in refusals(zen))


def test_a_submitter_cannot_read_another_users_outputs_by_naming_them_as_inputs(functions, zen, sign, publisher):
    """Alice's job a1 wrote gs://results/alice/a1/attempt-1/ (output_destination); Bob names it as his input."""
    alice_outputs = "gs://results/alice/a1/attempt-1/"
    request = {**a100s("b2", BOB), "inputs": [{"uri": alice_outputs}]}
    assert send(functions, "on_job_submitted", request, sign(BOB)) == 200
    with zen.db.transaction() as session:
        job = repository.get_job(session, "b2")
    assert job is None, (f"Bob's job reading Alice's outputs was accepted as {job.status.value}; its start "
                         f"names them: {started_with(publisher, 'b2', alice_outputs)}")
