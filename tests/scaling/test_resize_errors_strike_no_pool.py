"""A resize that Compute rate limits (403 rateLimitExceeded, the project's write quota for a moment), or one it
accepted whose operation could not be read (MigUnconfirmed, accepted), strikes no pool (``applied.resize_failed``):
either struck its pool as a stockout, and the one job was asked a third VM elsewhere, its history saying "not
added" and "every allowed region is stocked out", or its first VM asked for two minutes after the rate limit ended.
listErrors' RATE_LIMIT errors never strike either (``probes.strikes``: capacity errors only). Real Postgres, the
Compute stand-in through the official client; capacity in every region."""
from __future__ import annotations

from tests.messages import job_request
from tests.scaling.test_compute_bounds import make_stack  # noqa: F401 - fixture
from tests.scaling.test_scaling_integration import CLUSTER

REGIONS = ("us-central1", "us-west1", "europe-west4")


def decisions(zen):
    with zen.db.transaction() as session:
        return [(r["action"], r["region"], r["reason"]) for r in
                reversed(session.run("recent_scaling_decisions", cluster=CLUSTER, limit=200))]


def sizes(instances):
    return {r: len(instances(r)) for r in REGIONS}


def test_a_resize_compute_accepted_but_unconfirmed_is_added_and_asked_nowhere_else(
        make_stack):
    from zen_dev.local.invoke import FunctionsInvoker

    # Capacity everywhere; each resize's operation is still RUNNING when read, and that read is rate limited.
    zen, advance, instances, standin = make_stack(
        capacity={"default": 4}, api={"operation_delay_s": 30},
        faults={"rate_limit": {"fraction": 1.0, "methods": ["operations.get"]}})
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a"))  # its pass: one VM in us-central1 and a hedge in us-west1, both carried out
    assert sizes(instances) == {"us-central1": 1, "us-west1": 1, "europe-west4": 0}
    advance(20)
    fn.tick()
    got = decisions(zen)
    third = sizes(instances)
    not_added = [d for d in got if d[0] == "HOLD" and "not added" in d[2]]
    stocked = [d for d in got if d[0] == "HOLD" and "stocked out" in d[2]]
    blocks = [d for d in got if d[0] == "BLOCK"]
    assert third == {"us-central1": 1, "us-west1": 1, "europe-west4": 0}, \
        f"one job: {third} VMs; {len(not_added)} 'not added' HOLDs, {len(blocks)} BLOCKs, {len(stocked)} 'stocked out'"


def test_a_rate_limited_resize_strikes_no_pool_and_is_asked_again_next_pass(make_stack):
    from zen_dev.local.invoke import FunctionsInvoker

    # Compute rate limits resize calls for the first 65 s only (403 rateLimitExceeded: the project's rate quota,
    # every region alike); capacity everywhere.
    zen, advance, instances, standin = make_stack(
        capacity={"default": 4},
        faults={"rate_limit": {"windows": [{"from_s": 0, "to_s": 65}], "methods": ["resize"]}})
    fn = FunctionsInvoker(zen)
    fn.submit(job_request("a"))  # its pass: both resizes answered 403 rateLimitExceeded
    assert sizes(instances) == {r: 0 for r in REGIONS}
    waited = 0
    while sum(sizes(instances).values()) == 0 and waited < 600:
        advance(60)  # the rate limit is long over: one tick a minute
        waited += 60
        fn.tick()
    got = decisions(zen)
    blocks = [d for d in got if d[0] == "BLOCK"]
    stocked = [d for d in got if d[0] == "HOLD" and "stocked out" in d[2]]
    # The rate limit ended at 65 s; the tick at 120 s should ask for the job's VM.
    assert waited <= 120 and not stocked, \
        f"first VM asked at {waited}s though the rate limit ended at 65 s; {len(blocks)} BLOCKs, {len(stocked)} 'stocked out' HOLDs: {blocks}"
