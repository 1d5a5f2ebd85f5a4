"""A MIG gives a VM it recreates (after a preemption, a repair, a delete) the name of the one it replaces, and
the new VM's token names that VM as truly as the old one's did. Its token also says when the VM was created
(``instance_creation_timestamp``): a report about an attempt claimed before the reporting VM existed is not
that VM's. Refused, recorded with the reason and acked, it changes nothing: the attempt of the VM that is gone
is not kept alive by its successor's RUNNING, nor ended by its SUCCEEDED, nor claimed for it.

Through the functions with ``ZEN_VM_PROOF=required``, as in tests/test_vm_proof_functions.py."""

from __future__ import annotations

from datetime import timedelta

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_heartbeat_seq import ms, rejections
from tests.test_vm_proof_functions import VM_A, VM_B, proof, zen  # noqa: F401  (fixture)
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from zen.adapters.message_key import MessageKey, audience

RECREATED = "was created after attempt 1 of this job was claimed"


def recreated(issuer, clock, project, vm=VM_A):
    """The VM the MIG made under ``vm``'s name once that VM was gone (now): another instance, with its own agent's
    key."""
    agent = proof(issuer, clock, project, vm, key=MessageKey())
    agent.token = issuer.token(vm=vm, zone="us-central1-a", project=project, instance_id=2, now=clock().timestamp(),
                               created=clock().timestamp(), audience=audience(project, agent.key.fingerprint))
    return agent


def refused_as_recreated(functions, zen, signed: dict, job_id: str, status: str) -> None:
    """``signed`` (a recreated VM's report) acked, the job still ``status``, one rejection naming why."""
    assert functions.send("on_heartbeat", **signed).status_code == 200
    assert job(zen, job_id).status.value == status
    [reason] = rejections(zen)
    assert RECREATED in reason


def running(functions, clock, agent, job_id: str) -> int:
    """``job_id`` submitted, claimed and RUNNING on VM A (``agent``: its proof); the claim's seq."""
    functions.submit(job_request(job_id))
    start = ms(clock)
    functions.heartbeat(**agent(heartbeat(job_id, "CLAIMED", start, vm=VM_A)))
    functions.heartbeat(**agent(heartbeat(job_id, "RUNNING", start + 1, vm=VM_A)))
    return start


def test_a_vm_recreated_under_the_name_cannot_keep_the_running_attempt_alive_or_end_it(
        functions, zen, clock, issuer, project):
    first = proof(issuer, clock, project, VM_A)
    running(functions, clock, first, "victim")
    before = job(zen, "victim")
    assert before.status.value == "RUNNING"

    clock.advance(90)  # VM A was preempted; its MIG recreated it under its name
    second = recreated(issuer, clock, project)
    beat = ms(clock)
    assert functions.send("on_heartbeat", **second(heartbeat("victim", "RUNNING", beat, vm=VM_A))).status_code == 200
    assert functions.send("on_heartbeat", **second(heartbeat("victim", "SUCCEEDED", beat + 1, vm=VM_A,
                                                             exit_code=0))).status_code == 200
    after = job(zen, "victim")
    assert (after.status.value, after.last_seq, after.last_heartbeat_at) == (
        "RUNNING", before.last_seq, before.last_heartbeat_at)
    [reason] = rejections(zen)  # one row for the VM, job, attempt and cause, counting both (zen.store.rejections)
    assert RECREATED in reason


def test_a_vm_recreated_under_the_name_cannot_run_an_attempt_claimed_by_the_vm_before_it(
        functions, zen, clock, issuer, project):
    first = proof(issuer, clock, project, VM_A)
    functions.submit(job_request("claimed"))
    functions.heartbeat(**first(heartbeat("claimed", "CLAIMED", ms(clock), vm=VM_A)))
    assert job(zen, "claimed").status.value == "ASSIGNED"

    clock.advance(90)
    refused_as_recreated(functions, zen, recreated(issuer, clock, project)(
        heartbeat("claimed", "RUNNING", ms(clock), vm=VM_A)), "claimed", "ASSIGNED")


def test_the_vm_that_claimed_the_attempt_still_reports_for_it_with_a_token_fetched_later(
        functions, zen, clock, issuer, project):
    """The rule is the VM's creation, not its token's age: an agent fetches a new token every hour."""
    first = proof(issuer, clock, project, VM_A)
    running(functions, clock, first, "long")

    clock.advance(3000)
    later = proof(issuer, clock, project, VM_A, key=first.key)  # its token of the next hour
    functions.heartbeat(**later(heartbeat("long", "RUNNING", ms(clock), vm=VM_A)))
    functions.heartbeat(**later(heartbeat("long", "SUCCEEDED", ms(clock) + 1, vm=VM_A, exit_code=0)))
    assert job(zen, "long").status.value == "SUCCEEDED"
    assert rejections(zen) == []


def test_a_vm_recreated_under_the_name_cannot_end_the_attempt_the_sweep_took_for_lost(
        functions, zen, clock, issuer, project):
    """The late final report (zen.jobs.late_final) is believed from the VM that ran the lost attempt only."""
    first = proof(issuer, clock, project, VM_A)
    start = running(functions, clock, first, "lost")
    clock.advance(60)
    functions.tick()
    clock.advance(121)
    functions.tick()
    assert (job(zen, "lost").status.value, job(zen, "lost").attempt) == ("QUEUED", 2)

    second = recreated(issuer, clock, project)
    functions.send("on_heartbeat", **second(heartbeat("lost", "SUCCEEDED", ms(clock), vm=VM_A, exit_code=0)))
    assert (job(zen, "lost").status.value, job(zen, "lost").attempt) == ("QUEUED", 2)
    [reason] = rejections(zen)
    assert RECREATED in reason

    late = first(heartbeat("lost", "SUCCEEDED", start + 2, vm=VM_A, exit_code=0))  # the VM that ran it: believed
    assert functions.send("on_heartbeat", **late).status_code == 200
    assert (job(zen, "lost").status.value, job(zen, "lost").attempt) == ("SUCCEEDED", 1)


def test_a_vm_recreated_under_a_gang_nodes_name_cannot_end_the_gang(functions, zen, clock, issuer, project):
    """A gang's second node is not the job's VM (``job.vm`` names the first): its successor's FAILED ended the
    gang's attempt, whose nodes still ran."""
    nodes = {VM_A: proof(issuer, clock, project, VM_A), VM_B: proof(issuer, clock, project, VM_B)}
    functions.submit(job_request("pair", nodes=2))
    start = ms(clock)
    for k, (vm, agent) in enumerate(nodes.items()):
        functions.heartbeat(**agent(heartbeat("pair", "CLAIMED", start + k, vm=vm, ip=f"10.0.0.{k + 1}")))
    for vm, agent in nodes.items():
        functions.heartbeat(**agent(heartbeat("pair", "RUNNING", start + 2, vm=vm)))
    assert job(zen, "pair").status.value == "RUNNING"

    clock.advance(90)  # VM B was preempted; its MIG recreated it under its name
    refused_as_recreated(functions, zen, recreated(issuer, clock, project, VM_B)(
        heartbeat("pair", "FAILED", ms(clock), vm=VM_B, exit_code=1)), "pair", "RUNNING")


def test_a_vm_whose_running_overtook_its_claim_with_its_clock_behind_still_reports_and_ends_its_attempt(
        functions, zen, clock, issuer, project):
    """A RUNNING that overtook its CLAIMED wins the claim (zen.core.lifecycle); the start it records is held no
    earlier than Zen heard it, so an agent's clock behind GCE's does not put it before its own VM's creation, and
    the reports after it are that VM's, and apply."""
    functions.submit(job_request("overtaken"))
    clock.advance(600)  # the job waited for VM A, made for it
    agent = proof(issuer, clock, project, VM_A)  # its token: created now
    start = ms(clock)
    behind = (clock() - timedelta(seconds=120)).isoformat()  # the agent's clock two minutes behind GCE's
    functions.heartbeat(**agent(heartbeat("overtaken", "RUNNING", start + 1, vm=VM_A, sent_at=behind)))
    assert job(zen, "overtaken").status.value == "RUNNING"  # its CLAIMED comes later: the RUNNING won the claim

    clock.advance(30)
    functions.heartbeat(**agent(heartbeat("overtaken", "RUNNING", start + 2, vm=VM_A)))
    assert job(zen, "overtaken").last_seq == start + 2
    functions.heartbeat(**agent(heartbeat("overtaken", "SUCCEEDED", start + 3, vm=VM_A, exit_code=0)))
    assert job(zen, "overtaken").status.value == "SUCCEEDED"
    assert rejections(zen) == []
