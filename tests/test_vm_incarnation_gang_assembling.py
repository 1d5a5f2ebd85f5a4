"""A gang's node claimed while its gang assembled, its VM then recreated by its MIG under its name before the gang
was complete (``zen.core.incarnation``): the new VM's reports about the attempt are refused, as a one-VM job's are,
though the gang completed (and its row changed) after the new VM was made. Through the functions with
``ZEN_VM_PROOF=required``, as in tests/test_vm_incarnation.py."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_heartbeat_seq import ms, rejections
from tests.test_vm_incarnation import RECREATED, recreated
from tests.test_vm_proof_functions import VM_A, VM_B, proof, zen  # noqa: F401  (fixture)
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)


def test_a_vm_recreated_under_an_assembling_gang_nodes_name_cannot_report_for_that_node(
        functions, zen, clock, issuer, project):
    first_a, b = proof(issuer, clock, project, VM_A), proof(issuer, clock, project, VM_B)
    functions.submit(job_request("pair", nodes=2))
    functions.heartbeat(**first_a(heartbeat("pair", "CLAIMED", ms(clock), vm=VM_A, ip="10.0.0.1")))
    assert job(zen, "pair").status.value == "QUEUED"  # node 0 held by VM A; the gang waits for its second node

    clock.advance(90)  # VM A went without a word; its MIG recreated it under its name
    second_a = recreated(issuer, clock, project)
    clock.advance(30)
    functions.heartbeat(**b(heartbeat("pair", "CLAIMED", ms(clock), vm=VM_B, ip="10.0.0.2")))
    assert job(zen, "pair").status.value == "ASSIGNED"  # complete: both confirmed, the first to a VM now gone

    before = job(zen, "pair")
    assert functions.send("on_heartbeat", **second_a(heartbeat("pair", "RUNNING", ms(clock), vm=VM_A))).status_code == 200
    after = job(zen, "pair")
    assert [(n.vm, n.status) for n in after.gang] == [(n.vm, n.status) for n in before.gang]
    assert after.status.value == "ASSIGNED"
    [reason] = rejections(zen)
    assert RECREATED in reason
