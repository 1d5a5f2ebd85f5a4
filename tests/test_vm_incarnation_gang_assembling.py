"""A gang's node claimed while its gang assembled, its VM then recreated by its MIG under its name before the gang
was complete (``zen.core.incarnation``): the new VM's reports about the attempt are refused, as a one-VM job's are,
though the gang completed (and its row changed) after the new VM was made. The new VM's own claim of the part
replaces the node while the gang assembles (``zen.core.gang_assembly.claimed_again``), and once it is complete is
released, the gang retried. Through the functions with ``ZEN_VM_PROOF=required``, as in tests/test_vm_incarnation.py."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import controls, job
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


def test_a_vm_recreated_under_an_assembling_gang_nodes_name_that_claims_the_part_replaces_the_node(
        functions, zen, clock, issuer, project, publisher):
    """Its claim was taken as the old VM's repeated: the gang completed with the old VM's address told to every
    node (the rendezvous unreachable) and its claim time kept, so the new VM's reports were refused as made after
    it, and the gang was taken for lost, an attempt spent."""
    first_a, b = proof(issuer, clock, project, VM_A), proof(issuer, clock, project, VM_B)
    functions.submit(job_request("pair", nodes=2))
    functions.heartbeat(**first_a(heartbeat("pair", "CLAIMED", ms(clock), vm=VM_A, ip="10.0.0.1")))

    clock.advance(90)  # VM A went without a word; its MIG recreated it under its name, and its new agent claims
    second_a = recreated(issuer, clock, project)
    clock.advance(30)
    functions.heartbeat(**second_a(heartbeat("pair", "CLAIMED", ms(clock), vm=VM_A, ip="10.0.0.3")))
    [node] = job(zen, "pair").gang
    assert (node.ip, node.claimed_at) == ("10.0.0.3", clock())
    clock.advance(5)
    functions.heartbeat(**b(heartbeat("pair", "CLAIMED", ms(clock), vm=VM_B, ip="10.0.0.2")))
    assert job(zen, "pair").status.value == "ASSIGNED"
    assert [c["gang"]["ips"] for c in controls(publisher) if c["action"] == "CONFIRM"] == [["10.0.0.3", "10.0.0.2"]] * 2

    clock.advance(5)
    start = ms(clock)
    for agent, vm in ((second_a, VM_A), (b, VM_B)):
        functions.heartbeat(**agent(heartbeat("pair", "RUNNING", start, vm=vm)))
    assert [n.status for n in job(zen, "pair").gang] == ["RUNNING", "RUNNING"]
    for agent, vm in ((second_a, VM_A), (b, VM_B)):
        functions.heartbeat(**agent(heartbeat("pair", "SUCCEEDED", start + 1, vm=vm, exit_code=0)))
    assert (job(zen, "pair").status.value, job(zen, "pair").attempt) == ("SUCCEEDED", 1)
    assert rejections(zen) == []


def test_a_vm_recreated_under_a_confirmed_gang_nodes_name_that_claims_its_unstarted_part_is_released_and_the_gang_rerun(
        functions, zen, clock, issuer, project, publisher):
    """The gang completed while the VM made under node 0's name still booted: the other nodes were told the gone VM's
    address. The new VM's claim was answered CONFIRM with that address (its part run where no peer could meet it), its
    reports refused: the gang waited for node 0's silence and lost an attempt to it. The part is given back instead
    (``zen.core.gang.decide_given_back``): the new VM released, node 1 stopped, the gang retried unspent."""
    first_a, b = proof(issuer, clock, project, VM_A), proof(issuer, clock, project, VM_B)
    functions.submit(job_request("pair", nodes=2))
    functions.heartbeat(**first_a(heartbeat("pair", "CLAIMED", ms(clock), vm=VM_A, ip="10.0.0.1")))
    clock.advance(90)  # VM A went without a word; its MIG recreated it under its name
    second_a = recreated(issuer, clock, project)
    clock.advance(30)
    functions.heartbeat(**b(heartbeat("pair", "CLAIMED", ms(clock), vm=VM_B, ip="10.0.0.2")))
    functions.heartbeat(**b(heartbeat("pair", "RUNNING", ms(clock) + 1, vm=VM_B)))
    budget = job(zen, "pair").max_attempts
    told = len(controls(publisher, VM_A))

    clock.advance(60)  # the new VM's agent is up, and claims the part its name holds
    functions.heartbeat(**second_a(heartbeat("pair", "CLAIMED", ms(clock), vm=VM_A, ip="10.0.0.3")))
    assert [c["action"] for c in controls(publisher, VM_A)[told:]] == ["RELEASE"]
    assert (job(zen, "pair").status.value, controls(publisher, VM_B)[-1]["action"]) == ("STOPPING", "STOP")

    functions.heartbeat(**b(heartbeat("pair", "STOPPED", ms(clock) + 1, vm=VM_B, exit_code=143)))
    after = job(zen, "pair")
    assert (after.status.value, after.attempt, after.max_attempts) == ("QUEUED", 2, budget + 1)
