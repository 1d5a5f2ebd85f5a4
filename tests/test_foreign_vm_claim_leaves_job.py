"""A claim from a VM that is no instance of the job's cluster (its token proves its name, and its name another
cluster's MIG) is refused and changes nothing of the job, with ``ZEN_VM_PROOF=required``, through the functions.

It was refused as a claim of the job's own VMs is: the job's start was published again (a copy for every VM of its
regions to pull), and a second claim from the same VM set the job's ``widen_at`` to now, so the next tick sent a start
offered to a warm VM, or narrowed near its data, to every region at once (VMs asked for there). Any VM of any cluster
could do that to any queued job whose id it knew; only the job's own cluster's VMs may now."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_heartbeat_seq import ms, rejections
from tests.test_vm_proof_functions import VM_A, proof, zen  # noqa: F401  (fixture)
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from zen.store import repository

OTHER = "zen-1xl4-us-central1-c0c0"  # an instance of cluster 1xl4's MIG, not of 4xa100-40gb's


def _history(zen, job_id):
    with zen.db.transaction() as session:
        return repository.job_history(session, job_id)


def _starts(publisher, job_id):
    return [m for m in publisher.on("zen-job-start") if m.attributes.get("job_id") == job_id]


def test_a_vm_of_another_cluster_claiming_a_job_neither_republishes_nor_widens_its_start(
        functions, zen, clock, issuer, project, publisher):  # noqa: F811
    functions.submit(job_request("mine"))
    before, history, starts = job(zen, "mine"), len(_history(zen, "mine")), len(_starts(publisher, "mine"))
    agent = proof(issuer, clock, project, OTHER)
    for n in range(3):
        clock.advance(1)
        functions.heartbeat(**agent(heartbeat("mine", "CLAIMED", ms(clock) + n, vm=OTHER)))
    after = job(zen, "mine")
    assert (after.start_published_at, after.widen_at, after.start_regions, after.start_vms) == (
        before.start_published_at, before.widen_at, before.start_regions, before.start_vms)
    assert len(_starts(publisher, "mine")) == starts, "a foreign VM's claim published the job's start again"
    assert len(_history(zen, "mine")) == history
    assert any(f"VM {OTHER} is not an instance of cluster 4xa100-40gb's MIG in us-central1" in r for r in rejections(zen))
    # The job's own cluster's VM still claims it.
    functions.heartbeat(**proof(issuer, clock, project, VM_A)(heartbeat("mine", "CLAIMED", ms(clock) + 9, vm=VM_A)))
    assert job(zen, "mine").vm == VM_A
