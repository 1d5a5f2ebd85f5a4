"""A scale-down's drain and a claim by the same VM, interleaved on real Postgres.

A scaling pass reads the fleet, then drains each VM it deletes (``zen.store.fleet.drain_unless_busy``: the VM's
advisory lock, no job held, the mark) before it calls ``deleteInstances``; a claim reads the mark under the same
lock (``zen.store.repository.vm_is_draining``). Whichever commits first decides: a drain that got there first makes
the claim a RELEASE (the job stays QUEUED, its start published again), and a claim that got there first makes the
drain refuse (the VM is kept). These tests put the drain inside the claim's transaction, on its own connection, at
both sides of the claim's check (docs/explanations/scaling.md)."""

from __future__ import annotations

import json
import threading
import time

from tests.messages import heartbeat, job_request
from zen.store import fleet, repository

CLUSTER, REGION = "4xa100-40gb", "us-central1"


def drain(zen, vm: str) -> bool:
    """A scaling pass's drain, in its own transaction (``FleetDb.drain_unless_busy``)."""
    with zen.db.transaction() as session:
        return fleet.drain_unless_busy(session, vm, CLUSTER, REGION, zen.clock())


def job(zen, job_id: str):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id)


def answers(publisher, vm: str) -> list[tuple[str, str | None]]:
    return [(json.loads(m.data)["action"], m.attributes.get("refused")) for m in publisher.on("zen-vm-control")
            if json.loads(m.data)["vm"] == vm]


def test_a_drain_committed_while_a_claim_is_in_flight_refuses_that_claim(zen, functions, publisher):
    """The pass read vm-a idle, the claim's transaction began (the job's row locked), the drain committed, then the
    claim checked the VM: refused, the job QUEUED with its start published again; the VM holds nothing to lose."""
    functions.submit(job_request("j"))
    drained: list[bool] = []

    def meanwhile(*_args, **_kwargs) -> None:  # before the claim takes vm-a's lock
        if not drained:
            drained.append(drain(zen, "vm-a"))

    zen.store.hooks.before("vm_is_draining", meanwhile)
    try:
        functions.heartbeat(heartbeat("j", "CLAIMED", 1, vm="vm-a"))
    finally:
        zen.store.hooks.clear()
    assert drained == [True]
    assert job(zen, "j").status.value == "QUEUED" and job(zen, "j").vm is None
    assert answers(publisher, "vm-a") == [("RELEASE", "draining")]
    assert len(publisher.on("zen-job-start")) == 2  # published again for another VM


def test_a_drain_that_waits_behind_a_winning_claim_sees_the_job_and_keeps_the_vm(zen, functions, publisher):
    """The claim checked vm-a (not draining) and holds its lock; the drain starts then, waits for the lock, and reads
    the job the claim committed: refused, so the delete is not made; the claim is confirmed."""
    functions.submit(job_request("j"))
    threads: list[threading.Thread] = []
    drained: list[bool] = []

    def meanwhile(*_args, **_kwargs) -> None:  # the claim holds vm-a's lock now, its job not yet written
        if not threads:
            threads.append(threading.Thread(target=lambda: drained.append(drain(zen, "vm-a")), daemon=True))
            threads[0].start()
            time.sleep(0.5)  # the drain waits for vm-a's lock

    zen.store.hooks.after("vm_is_draining", meanwhile)
    try:
        functions.heartbeat(heartbeat("j", "CLAIMED", 1, vm="vm-a"))
    finally:
        zen.store.hooks.clear()
    threads[0].join(30)
    assert drained == [False]
    assert job(zen, "j").status.value == "ASSIGNED" and job(zen, "j").vm == "vm-a"
    assert answers(publisher, "vm-a") == [("CONFIRM", None)]
    with zen.db.transaction() as session:
        assert "vm-a" not in fleet.drained_vms(session, CLUSTER)
