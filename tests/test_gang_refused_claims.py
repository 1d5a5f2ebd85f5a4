"""A gang assembling keeps a start out for each node it lacks, whatever VMs refused meanwhile.

A VM whose claim of a gang's part is refused (here a spot VM idle in the region, the gang accepting standard VMs
only) drops its copy of the start. Its second refusal since the start was last published held the start back (as a
single VM's job's is, until the tick), and for a gang nothing published it then: the assembly deadline is the
gang's ``widen_at`` (``zen.core.gang_assembly.keep_deadline``). The VM booted for the missing node found no start,
and the gang waited out ``gangs.assemble_s`` (600 s), its claimed nodes idle, before it was released and retried.
"""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_shape_choice_by_pool import two_models  # noqa: F401  (fixture: clusters of [standard, spot])
from zen.store import repository

CLUSTER = "4xa100-40gb"
STANDARD = ("zen-4xa100-40gb-us-central1-aa11", "zen-4xa100-40gb-us-central1-cc33")  # the primary (standard) pool
SPOT_VM = "zen-4xa100-40gb-us-central1-spot-bb22"  # the spot pool's MIG: <primary MIG>-spot
EPOCH_MS = 1_700_000_000_000


def starts(publisher, job_id: str) -> int:
    return sum(1 for m in publisher.on("zen-job-start") if m.attributes.get("job_id") == job_id)


def test_a_gang_keeps_a_start_out_for_its_missing_node_after_a_vm_refused_twice(
        two_models, publisher, clock):
    zen, functions = two_models
    functions.submit(job_request("g", cluster=CLUSTER, nodes=2, provisioning="standard"))
    assert starts(publisher, "g") == 2  # one copy per node

    functions.heartbeat(heartbeat("g", "CLAIMED", EPOCH_MS, vm=STANDARD[0]))  # node 0 holds the first copy
    clock.advance(1)
    functions.heartbeat(heartbeat("g", "CLAIMED", EPOCH_MS + 1_000, vm=SPOT_VM))  # the second copy: refused, dropped
    assert starts(publisher, "g") == 3  # published again for the missing node
    clock.advance(2)  # the spot VM's backoff over, it pulls that copy too: refused, dropped again
    functions.heartbeat(heartbeat("g", "CLAIMED", EPOCH_MS + 3_000, vm=SPOT_VM))
    clock.advance(61)
    functions.tick()

    with zen.db.transaction() as session:
        job = repository.get_job(session, "g")
    assert (job.status.value, job.attempt, [n.vm for n in job.gang or ()]) == ("QUEUED", 1, [STANDARD[0]])
    # Three copies went out and each was taken (node 0 holds one, the spot VM dropped two): without a fourth, the
    # standard VM booted for node 1 has nothing to claim until the assembly deadline releases node 0.
    assert starts(publisher, "g") == 4, f"{starts(publisher, 'g')} starts published for 3 copies taken"

    functions.heartbeat(heartbeat("g", "CLAIMED", EPOCH_MS + 70_000, vm=STANDARD[1]))  # that copy, claimed
    with zen.db.transaction() as session:
        job = repository.get_job(session, "g")
    assert job.status.value == "ASSIGNED"


def test_a_repeated_refusal_publishes_the_one_copy_dropped_not_one_per_missing_node(
        two_models, publisher, clock):
    """Three nodes, one claimed: the first refusal publishes the start for both missing nodes (as before); each
    repeat publishes the one copy its VM dropped, so a VM refusing as often as its backoff lets it does not pile
    copies up."""
    zen, functions = two_models
    functions.submit(job_request("g3", cluster=CLUSTER, nodes=3, provisioning="standard"))
    functions.heartbeat(heartbeat("g3", "CLAIMED", EPOCH_MS, vm=STANDARD[0]))
    assert starts(publisher, "g3") == 3
    for k in range(1, 4):  # refused three times: 2 copies, then 1 and 1
        clock.advance(2)
        functions.heartbeat(heartbeat("g3", "CLAIMED", EPOCH_MS + k * 2_000, vm=SPOT_VM))
    assert starts(publisher, "g3") == 3 + 2 + 1 + 1
