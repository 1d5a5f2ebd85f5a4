"""A VM whose agent said RETIRED (a fault of its own, a pull limit, a drain) takes no more jobs and is deleted once
it holds none. Its agent keeps that on disk across its own restarts (``zen.agent.retired``); a disk that did not keep
the mark, or an older agent, left an agent restarted on the same VM claiming again, its claim drawn after the RETIRED
and so taken for a VM its MIG recreated under the name. With VM proof on, the token's creation time tells them apart
(``zen.core.incarnation``): the same VM's claim is refused (RELEASE, cause ``draining``, its reason recorded), a
recreated VM's (created later) is accepted.

Through the functions with ``ZEN_VM_PROOF=required``, as in tests/test_vm_incarnation.py."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_heartbeat_seq import ms, rejections
from tests.test_vm_incarnation import recreated
from tests.test_vm_proof_functions import VM_A, proof, zen  # noqa: F401  (fixture)
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from zen.adapters.message_key import MessageKey
from zen.scaling.model import VmPhase
from zen.scaling.port import MigInstance
from zen.scaling.vms import classify
from zen.store import fleet

SAID_RETIRED = f"VM {VM_A} said RETIRED before (the same VM"


def vm_beat(state: str, seq: int) -> dict:
    return {"version": 1, "kind": "vm", "vm": VM_A, "cluster": "4xa100-40gb", "region": "us-central1",
            "zone": "us-central1-a", "state": state, "seq": seq, "sent_at": datetime.now(timezone.utc).isoformat()}


def releases(publisher) -> list[tuple[str, str | None]]:
    return [(json.loads(m.data)["job_id"], m.attributes.get("refused")) for m in publisher.on("zen-vm-control")
            if json.loads(m.data).get("action") == "RELEASE"]


def test_a_restarted_agent_of_a_retired_vm_cannot_claim_again_but_its_recreated_successor_can(
        functions, zen, publisher, clock, issuer, project):
    first = proof(issuer, clock, project, VM_A)
    functions.heartbeat(**first(vm_beat("RETIRED", ms(clock))))  # a fault of the VM's own: it takes no more jobs
    functions.submit(job_request("next"))

    clock.advance(30)  # its agent restarts, its retirement not kept: a new key, the same VM (its creation time)
    restarted = proof(issuer, clock, project, VM_A, key=MessageKey())
    functions.heartbeat(**restarted(vm_beat("IDLE", ms(clock))))
    functions.heartbeat(**restarted(heartbeat("next", "CLAIMED", ms(clock) + 1, vm=VM_A)))
    assert job(zen, "next").status.value == "QUEUED"
    assert releases(publisher) == [("next", "draining")]
    [reason] = rejections(zen)
    assert SAID_RETIRED in reason

    clock.advance(90)  # the VM deleted, or preempted: its MIG recreates it under the name, a VM created later
    successor = recreated(issuer, clock, project)
    functions.heartbeat(**successor(vm_beat("IDLE", ms(clock))))
    functions.heartbeat(**successor(heartbeat("next", "CLAIMED", ms(clock) + 1, vm=VM_A)))
    assert job(zen, "next").status.value == "ASSIGNED"


def test_a_retired_vm_whose_restarted_agent_says_idle_is_no_idle_supply_but_deleted_as_retired(
        functions, zen, publisher, clock, issuer, project):
    """Its claims all refused, the VM is no idle VM to the scaling pass: taken for one, a queued job waited on it (no
    VM added for the job), and it was kept until its idle time ran out (for ever under a cluster's min_vms)."""
    first = proof(issuer, clock, project, VM_A)
    functions.heartbeat(**first(vm_beat("RETIRED", ms(clock))))
    clock.advance(30)
    restarted = proof(issuer, clock, project, VM_A, key=MessageKey())
    functions.heartbeat(**restarted(vm_beat("IDLE", ms(clock))))

    with zen.db.transaction() as session:
        agents = fleet.agents(session, "4xa100-40gb")
    seen = classify(MigInstance(VM_A, "us-central1-a", "NONE", "RUNNING", None), "us-central1", clock(), {}, agents)
    assert (seen.phase, seen.retiring) == (VmPhase.DELETING, True)
