"""A VM of a region the configuration tags, reporting no such tag (it booted from the instance template before
the operator added the tag to the region: the MIG's update policy is OPPORTUNISTIC, so it keeps its old template),
claims a job that requires the tag. The refusal (then only lifecycle.decide_heartbeat's) republished the start
on every claim, and its RELEASE carried no ``refused`` cause, so the agent did not back off (zen.agent.backoff):
the VM pulled the new copy at once and claimed again, a claim storm for as long as the job waited. It is a cause
of its own now (claims.MISSING_TAGS), the start published once per cause and VM, as for every other cause."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_tags import tagged  # noqa: F401 - the fixture


def starts(publisher, job_id):
    return sum(1 for m in publisher.on("zen-job-start") if m.attributes.get("job_id") == job_id)


def releases(publisher, vm):
    return [m.attributes for m in publisher.on("zen-vm-control")
            if m.attributes.get("vm") == vm and m.attributes.get("action") == "RELEASE"]


def test_a_vm_lacking_the_jobs_tags_does_not_republish_the_start_on_every_claim(tagged, publisher, clock):
    zen, functions = tagged
    functions.submit(job_request("phi-storm", requires_tags=["hipaa"]))
    assert starts(publisher, "phi-storm") == 1
    for seq in range(1, 7):  # the old-template VM pulls each copy published and claims it again
        clock.advance(0.5)
        functions.heartbeat(heartbeat("phi-storm", "CLAIMED", seq, vm="vm-old"))  # reports no tags
    assert len(releases(publisher, "vm-old")) == 6
    # As for every other refusal cause: the RELEASE names a cause (the agent backs off) and the start goes out
    # again once per cause and VM since it was last published, not once per claim.
    assert starts(publisher, "phi-storm") <= 2, f"start published {starts(publisher, 'phi-storm')} times for 6 claims"
    assert all(r.get("refused") for r in releases(publisher, "vm-old")), releases(publisher, "vm-old")
