"""The VM that claimed an attempt is never taken for a VM made after it: a RUNNING that overtook its CLAIMED wins
the claim (zen.core.lifecycle), and the start it records is the agent's clock's (held between Zen's own times),
which may run behind GCE's. The reports after it are that VM's, and apply.

Through the functions with ``ZEN_VM_PROOF=required``, as in tests/test_vm_incarnation.py."""

from __future__ import annotations

from datetime import timedelta

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_heartbeat_seq import ms, rejections
from tests.test_vm_proof_functions import VM_A, proof, zen  # noqa: F401  (fixture)
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)


def test_a_vm_whose_running_overtook_its_claim_with_its_clock_behind_still_reports_and_ends_its_attempt(
        functions, zen, clock, issuer, project):
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
