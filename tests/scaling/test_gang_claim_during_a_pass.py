"""A gang node's claim recorded while a scaling pass reads the fleet: the pass must see the gang's demand and the
VMs that hold it as of one moment. Read apart, the demand came from before the claim (the gang needs both its
nodes) and the held VMs from after it (the claiming VM busy): no pool had the gang's two VMs, the cluster's
``max_vms`` left no room, and the pass deleted the VM still booting for the gang's other node, so the gang waited
for a whole new boot (billed) while its first node held its claim, or for its assembly deadline.

Real Postgres, the Compute stand-in through the official client; the claim is committed on its own connection
between two of the pass's reads (the ``Interleaved`` query catalogue), so the race is the same on every run."""

from __future__ import annotations

import pytest

from tests.messages import heartbeat, job_request
from tests.scaling.test_scaling_integration import BOOT_S, CLUSTER, build_stack, vm_beat

REGION = "us-west1"  # capacity 4 in the stand-in's scenario (us-central1 has none)


@pytest.fixture
def config(project):
    from zen.core.config import load_config

    config = load_config().model_copy(update={"project": project})
    clusters = [c.model_copy(update={"max_vms": 2}) if c.name == CLUSTER else c for c in config.clusters]
    return config.model_copy(update={"clusters": clusters})


def deleted(db) -> list[tuple[str, str, str]]:
    """The cluster's scaling decisions that deleted a VM: (action, VM, reason)."""
    with db.transaction() as session:
        return [(r["action"], r["vm"], r["reason"]) for r in session.run("recent_scaling_decisions", cluster=CLUSTER,
                                                                         limit=50) if r["action"] == "DELETE"]


class Interleaved(dict):
    """The database's query catalogue, which runs ``hook`` once, just before the first statement named ``before``
    is looked up: another transaction commits between two statements of the transaction that runs it."""

    def __init__(self, queries: dict[str, str], before: str, hook):
        super().__init__(queries)
        self.before, self.hook = before, hook

    def __getitem__(self, name: str) -> str:
        if name == self.before and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return super().__getitem__(name)


@pytest.fixture
def booted_pair(config, db, publisher, clock, monkeypatch, tmp_path):
    """The gang "pair" (2 nodes in REGION) submitted and its two VMs RUNNING, the first's agent up, the second's not
    yet (``max_vms`` 2: no spare): the functions, the two VMs, and the names of the MIG's instances now."""
    from zen_dev.local.invoke import FunctionsInvoker

    zen, advance, instances, standin = build_stack(config, db, publisher, clock, monkeypatch, tmp_path)
    try:
        fn = FunctionsInvoker(zen)
        fn.submit(job_request("pair", nodes=2, regions=[REGION]))
        assert len(instances(REGION)) == 2  # the gang's two VMs: max_vms leaves no room for a spare
        advance(BOOT_S + 1)
        first, second = instances(REGION)
        yield fn, first, second, lambda: [i.name for i in instances(REGION)]
    finally:
        standin.stop()


def test_a_booting_vm_a_gang_needs_is_kept_when_its_first_node_claims_during_the_pass(booted_pair, db, clock):
    fn, first, second, names = booted_pair

    def claim():  # the first VM claims node 0 of the gang, committed on another connection
        fn.heartbeat(heartbeat("pair", "CLAIMED", 1, vm=first.name, region=REGION, zone=first.zone))

    db.queries = Interleaved(db.queries, "held_vms_of_cluster", claim)  # after the demand is read
    fn.heartbeat(vm_beat(first.name, REGION, "IDLE", 1, sent_at=clock().isoformat()))  # its first word: a pass
    assert db.queries.hook is None  # the claim came during that pass
    with db.transaction() as session:
        gang = session.sql("SELECT gang FROM jobs WHERE job_id = 'pair'")[0]["gang"]
    assert [node["vm"] for node in gang] == [first.name], gang
    assert not (gone := deleted(db)) and names() == [first.name, second.name], gone
