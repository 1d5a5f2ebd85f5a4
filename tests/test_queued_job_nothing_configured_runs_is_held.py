"""A queued job the configuration stops serving while it waits (its cluster removed, every region it allows removed
from its cluster, the one provisioning model it accepts removed, a gang above its cluster's lowered
``max_vms_per_region``) is held by the scale tick before its scaling pass: PENDING, its hold and ``zen explain`` naming
the change and what the job asks, no VM asked for it, looked at every 5 minutes (``zen.jobs.stranding``). Left QUEUED,
``zen jobs get`` showed no hold and the oldest queued job's alert fired for a job no capacity could start. Once the
configuration serves it again, the tick that looks at it again lets it go, QUEUED; a held job whose reason changes
(another change of the configuration) is held for the new one (docs/how-to/operate.md, Changing a cluster)."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from zen.store import repository
from tests.test_no_vm_for_a_job_above_lowered_gpu_count import C, REGIONS, _job, stack  # noqa: F401 - the fixture


def _changed(config, **update):
    """``config`` with cluster ``C`` changed so (``None``: removed)."""
    return config.model_copy(update={"clusters": [
        c.model_copy(update=update) if c.name == C else c for c in config.clusters
        if c.name != C or update.get("name") != "gone"]})


def _history(zen, job_id):
    with zen.db.transaction() as session:
        return [row["reason"] for row in repository.job_history(session, job_id)]


CHANGES = {  # what the operator changes, the job it strands, and what its hold must name
    "cluster removed": ({"name": "gone"}, {}, ("cluster 8xa100-40gb, the job's, is not in the configuration",)),
    "its regions removed": ({"regions": ["us-central1", "europe-west4"]}, {"regions": ["us-west1"]},
                            ("no longer runs in us-west1", "the regions the job allows")),
    "its model removed": ({"provisioning": ["spot"]}, {"provisioning": "standard"},
                          ("no longer lists standard", "the one provisioning model the job accepts")),
    "flex-start alone, shorter than it names": (  # the job accepts any model: flex-start is the one left
        {"provisioning": ["flex-start"], "flex_start_run_s": 3600}, {"max_runtime_s": 7200},
        ("its max_runtime_s (7200 s) is now above how long a flex-start VM of cluster 8xa100-40gb runs",)),
    "a gang above max_vms_per_region": ({"max_vms_per_region": 1}, {"nodes": 2},
                                        ("nodes: 2 is above cluster 8xa100-40gb's max_vms_per_region (1)",)),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_queued_job_nothing_configured_can_run_is_held_and_let_go_once_it_can(config, stack, change):
    update, asked, named = CHANGES[change]
    scaled, advance, vms = stack
    zen, functions = scaled(config, scaling=False)  # submitted before the change, no scaling pass since
    functions.submit(job_request("j", cluster=C, **asked))
    assert _job(zen, "j")[0].status.value == "QUEUED"
    zen, functions = scaled(_changed(config, **update))  # the operator's change
    functions.tick()
    job, why = _job(zen, "j")
    assert job.status.value == "PENDING" and job.hold and all(n in job.hold for n in named), (job.status, job.hold)
    assert why.startswith("held: ") and named[0] in why, why
    assert vms() == {r: 0 for r in REGIONS}, f"a VM asked for a job no VM of the configuration may run: {vms()}"
    told = _history(zen, "j")
    advance(301)
    functions.tick()  # looked at again: still nothing can run it, its hold kept as it was, nothing told (not let go)
    job, _ = _job(zen, "j")
    assert job.status.value == "PENDING" and all(n in job.hold for n in named), job.hold
    assert _history(zen, "j") == told, _history(zen, "j")[len(told):]

    zen, functions = scaled(config)  # the change undone: the job is let go at its next look
    advance(301)
    functions.tick()
    job, why = _job(zen, "j")
    assert (job.status.value, job.hold) == ("QUEUED", None), (job.status, job.hold)
    assert "no VM can take it" not in why, why


def test_a_held_job_whose_reason_changes_is_held_for_the_new_one(config, stack):
    scaled, advance, vms = stack
    zen, functions = scaled(config, scaling=False)
    functions.submit(job_request("r", cluster=C, regions=["us-west1"]))
    zen, functions = scaled(_changed(config, name="gone"))  # its cluster removed
    functions.tick()
    job, _ = _job(zen, "r")
    assert job.status.value == "PENDING" and "is not in the configuration" in job.hold, job.hold

    zen, functions = scaled(_changed(config, regions=["us-central1", "europe-west4"]))  # back, without us-west1
    advance(301)
    functions.tick()
    job, why = _job(zen, "r")
    assert job.status.value == "PENDING" and "no longer runs in us-west1" in job.hold, job.hold
    assert "is not in the configuration" not in job.hold and "no longer runs in us-west1" in why, why
    advance(301)
    functions.tick()  # looked at again, the same reason: nothing more told
    notes = [reason for reason in _history(zen, "r") if reason.startswith("still held")]
    assert len(notes) == 1 and "no longer runs in us-west1" in notes[0], notes

    zen, functions = scaled(config)  # us-west1 back: let go, and a VM asked for it there
    advance(301)
    functions.tick()
    job, _ = _job(zen, "r")
    assert (job.status.value, job.hold, job.regions) == ("QUEUED", None, ["us-west1"]), (job.status, job.hold)
    for _ in range(5):
        if vms()["us-west1"]:
            break
        advance(31)
        functions.tick()
    assert vms()["us-west1"] == 1 and vms()["us-central1"] == vms()["europe-west4"] == 0, vms()
