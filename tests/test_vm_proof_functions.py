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


def test_a_claim_from_outside_the_region_it_names_is_rejected(functions, zen, clock, issuer, project):
    """The token proves the zone; a claim's allowed regions (and tags, set per region) are judged by the
    heartbeat's region, which must therefore be the zone's: a us-central1 VM claimed a europe-west4-only
    job by naming europe-west4."""
    functions.submit(job_request("eu-only", regions=["europe-west4"]))
    lying = heartbeat("eu-only", "CLAIMED", ms(clock), vm="vm-a", region="europe-west4", zone="us-central1-a")
    assert functions.send("on_heartbeat", lying, attributes=proof(issuer, clock, project, "vm-a")).status_code == 200
    assert job(zen, "eu-only").status.value == "QUEUED"
    [reason] = rejections(zen)
    assert "names region 'europe-west4' and zone 'us-central1-a', which is not in it" in reason


def test_a_token_nested_too_deep_or_too_long_is_rejected_not_a_500(functions, zen, clock):
    """A header of 2,900 '[' (under 4,096 characters) made json raise RecursionError: 500 on every
    delivery, then the dead letters; one far longer than any real token is refused undecoded."""
    import base64

    from zen.vm_proof import token_attributes

    deep = base64.urlsafe_b64encode(b"[" * 2900).decode().rstrip("=") + ".e30.c2ln"
    for n, forged in enumerate((deep, "a" * 20_000 + ".e30.c2ln")):
        functions.submit(job_request(f"deep-{n}"))
        beat = heartbeat(f"deep-{n}", "CLAIMED", ms(clock) + n, vm="vm-a")
        assert functions.send("on_heartbeat", beat, attributes=token_attributes(forged)).status_code == 200
        assert job(zen, f"deep-{n}").status.value == "QUEUED"
    deep_reason, long_reason = rejections(zen)
    assert "the vm_proof attribute is not a JWT" in deep_reason
    assert "characters long, over 4096: not a VM identity token" in long_reason
