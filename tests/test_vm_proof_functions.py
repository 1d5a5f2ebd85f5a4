"""Through the functions, with ``ZEN_VM_PROOF=required``: a heartbeat is applied only when its
``vm_proof`` token, checked against the issuer's certificates, names the VM, zone and project the
heartbeat names. Anyone else's report (another VM's token, none at all) is rejected, recorded and
acked, and changes nothing."""

from __future__ import annotations

import json

import pytest

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_heartbeat_seq import ms, rejections, vm_beat
from tests.test_vm_proof import _CertsServer
from zen.local.compute.issuer import TokenIssuer
from zen.store import repository
from zen.vm_proof import ATTRIBUTE, audience


@pytest.fixture(scope="module")
def issuer():
    return TokenIssuer()


@pytest.fixture
def certs(issuer):
    server = _CertsServer(json.dumps(issuer.certs()).encode(), "public, max-age=3600")
    yield server
    server.close()


@pytest.fixture
def zen(config, db, publisher, clock, certs, monkeypatch):
    """The test's Zen, built (as in production) with the proof mode of its environment."""
    from zen.app import Zen

    monkeypatch.setenv("ZEN_VM_PROOF", "required")
    monkeypatch.setenv("ZEN_VM_PROOF_CERTS_URL", certs.url)
    zen = Zen(config, db, publisher, clock)
    yield zen
    zen.relay.marks.flush()


def proof(issuer, clock, project, vm, zone="us-central1-a") -> dict[str, str]:
    return {ATTRIBUTE: issuer.token(vm=vm, zone=zone, project=project, audience=audience(project),
                                    now=clock().timestamp())}


def test_a_report_for_vm_a_with_vm_b_token_is_rejected_and_vm_a_own_applies(functions, zen, clock, issuer,
                                                                              project):
    vm_a, vm_b = proof(issuer, clock, project, "vm-a"), proof(issuer, clock, project, "vm-b")
    functions.submit(job_request("victim"))
    start = ms(clock)
    functions.heartbeat(heartbeat("victim", "CLAIMED", start, vm="vm-a"), attributes=vm_a)
    functions.heartbeat(heartbeat("victim", "RUNNING", start + 1, vm="vm-a"), attributes=vm_a)
    assert job(zen, "victim").status.value == "RUNNING"

    forged = heartbeat("victim", "SUCCEEDED", start + 2, vm="vm-a", exit_code=0)
    assert functions.send("on_heartbeat", forged, attributes=vm_b).status_code == 200  # acked
    assert job(zen, "victim").status.value == "RUNNING"
    [reason] = rejections(zen)
    assert "names VM 'vm-a' but its vm_proof token is for VM 'vm-b'" in reason

    functions.heartbeat(heartbeat("victim", "SUCCEEDED", start + 3, vm="vm-a", exit_code=0), attributes=vm_a)
    assert job(zen, "victim").status.value == "SUCCEEDED"


def test_a_heartbeat_without_a_token_is_rejected(functions, zen, clock):
    functions.submit(job_request("unproven"))
    assert functions.send("on_heartbeat", heartbeat("unproven", "CLAIMED", ms(clock), vm="vm-a")).status_code == 200
    assert job(zen, "unproven").status.value == "QUEUED"
    [reason] = rejections(zen)
    assert "carries no vm_proof attribute" in reason


def test_a_vm_heartbeat_with_another_vm_token_is_rejected(functions, zen, clock, issuer, project):
    functions.heartbeat(vm_beat("RETIRED", ms(clock), clock()), attributes=proof(issuer, clock, project, "vm-a"))
    with zen.db.transaction() as session:
        assert [row for row in repository.list_vms(session) if row["name"] == "vm-b"] == []
    [reason] = rejections(zen)
    assert "names VM 'vm-b' but its vm_proof token is for VM 'vm-a'" in reason
    functions.heartbeat(vm_beat("IDLE", ms(clock) + 1, clock()), attributes=proof(issuer, clock, project, "vm-b"))
    with zen.db.transaction() as session:
        assert [row["state"] for row in repository.list_vms(session) if row["name"] == "vm-b"] == ["IDLE"]
