"""docs/how-to/operate.md ("Changing a cluster") and docs/reference/cli.md promise that a job queued before a
configuration change that no VM can take now (its cluster or regions gone) "waits, and `zen explain` says why"
and "is not failed but waits until the configuration serves it again, or its user stops it". The same page says
the functions may take the new configuration before terraform destroyed the old MIGs: a VM of such a MIG still
pulls the job's start (published before the change, or republished by the tick) and claims it. That claim is
refused and the job waits, held PENDING with the reason; it cancelled the job ("none of its regions can run it
now"), and for a removed cluster its reason said "cluster X no longer uses region R"."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from zen.app import Zen
from zen.store import repository
from zen_dev.local.invoke import FunctionsInvoker

C = "4xa100-40gb"


def _status(zen, job_id):
    with zen.db.transaction() as session:
        return repository.get_job(session, job_id).status.value


def test_a_removed_clusters_leftover_vm_claiming_a_queued_job_does_not_cancel_it(config, db, publisher, clock):
    FunctionsInvoker(Zen(config, db, publisher, clock)).submit(job_request("q1"))
    changed = config.model_copy(update={"clusters": [c for c in config.clusters if c.name != C]})
    after = FunctionsInvoker(Zen(changed, db, publisher, clock))
    # terraform has not destroyed the MIG yet: its idle VM pulls the start and claims the job
    after.heartbeat(heartbeat("q1", "CLAIMED", 1, vm="zen-4xa100-40gb-us-central1-abcd"))
    zen = Zen(changed, db, publisher, clock)
    assert _status(zen, "q1") == "PENDING"  # held, no longer demand: it waits
    with zen.db.transaction() as session:
        [refused] = [r["reason"] for r in repository.list_rejections(session)]
    assert refused.startswith(f"cluster {C} is no longer in the configuration; none of its regions can run it now")


def test_a_dropped_regions_leftover_vm_claiming_a_queued_job_does_not_cancel_it(config, db, publisher, clock):
    FunctionsInvoker(Zen(config, db, publisher, clock)).submit(job_request("west", regions=["us-west1"]))
    clusters = [c.model_copy(update={"regions": ["us-central1", "europe-west4"]}) if c.name == C else c
                for c in config.clusters]
    changed = config.model_copy(update={"clusters": clusters})
    zen = Zen(changed, db, publisher, clock)
    FunctionsInvoker(zen).heartbeat(heartbeat("west", "CLAIMED", 1, vm="zen-4xa100-40gb-us-west1-abcd",
                                              region="us-west1", zone="us-west1-a"))
    assert _status(zen, "west") == "PENDING"
