"""Several acceptable GPU shapes per request (zen.jobs.placement): the function takes the first shape with
quota free and a region in stock, else the first; shapes no queue or region allows drop out. And the
limits a request resolves to."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.messages import job_request
from tests.test_queues import queued_zen, status, with_queues  # noqa: F401 - fixture
from zen.store import fleet, repository


def fungible(job_id, types, count=1, **extra):
    return job_request(job_id, cluster=None, gpu_types=types, gpu_count=count, **extra)


def placed(zen, job_id):
    with zen.db.transaction() as session:
        job = repository.get_job(session, job_id)
        first = repository.job_history(session, job_id)[0]
    return job.cluster, job.status.value, first["reason"]


def test_the_first_acceptable_shape_is_taken_and_unknown_types_drop_out(functions, zen):
    functions.submit(fungible("f1", ["nvidia-h100-80gb", "nvidia-tesla-a100", "nvidia-l4"]))
    cluster, state, reason = placed(zen, "f1")
    assert (cluster, state) == ("4xa100-40gb", "QUEUED")
    assert reason == "submitted; GPU shape 4xa100-40gb"


def test_a_shape_whose_regions_are_all_stocked_out_is_passed_over(functions, zen, clock):
    until = (clock() + timedelta(minutes=10)).isoformat()
    with zen.db.transaction() as session:
        for region in zen.config.cluster("4xa100-40gb").regions:
            fleet.save_scaling_memory(session, "4xa100-40gb", region, json.dumps({"blocked_until": until}), clock())
    functions.submit(fungible("f2", ["nvidia-tesla-a100", "nvidia-l4"]))
    cluster, _, reason = placed(zen, "f2")
    assert cluster == "1xl4"
    assert reason == "submitted; GPU shape 1xl4 (4xa100-40gb: every allowed region is stocked out)"


def test_requests_no_shape_can_take_are_rejected_with_each_reason(functions, zen):
    functions.submit(fungible("f3", ["nvidia-h100-80gb", "nvidia-l4"], count=2))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "f3") is None
        [rejection] = repository.list_rejections(session)
    assert rejection["reason"].startswith("none of the GPU types can take the job (nvidia-h100-80gb: no cluster "
                                          "has 2 or more per VM; nvidia-l4: no cluster has 2 or more per VM)")


def test_gpu_type_and_gpu_types_together_are_refused(functions, zen):
    functions.submit(job_request("f4", cluster=None, gpu_type="nvidia-l4", gpu_types=["nvidia-l4"], gpu_count=1))
    with zen.db.transaction() as session:
        [rejection] = repository.list_rejections(session)
    assert "give gpu_type or gpu_types, not both" in rejection["reason"]


@pytest.mark.queues([{"name": "default", "quota": {"4xa100-40gb": 4, "1xl4": 1}}])
def test_with_queues_the_first_shape_with_quota_free_is_taken_else_the_first(queued_zen):  # noqa: F811
    zen, functions = queued_zen
    for n in (1, 2, 3):
        functions.submit(fungible(f"q{n}", ["nvidia-tesla-a100", "nvidia-l4"]))
    assert [placed(zen, f"q{n}")[:2] for n in (1, 2, 3)] == [
        ("4xa100-40gb", "QUEUED"), ("1xl4", "QUEUED"), ("4xa100-40gb", "PENDING")]
    assert placed(zen, "q2")[2] == "submitted; GPU shape 1xl4 (4xa100-40gb: queue default's cohort has no quota free)"
    assert placed(zen, "q3")[2].startswith("submitted; GPU shape 4xa100-40gb, the first: none had room")


@pytest.mark.queues([{"name": "team-a", "cohort": "lab", "quota": {"4xa100-40gb": 8, "1xl4": 4},
                      "borrowing_limit": {"4xa100-40gb": 0}, "users": ["alice"]},
                     {"name": "team-b", "cohort": "lab", "quota": {"4xa100-40gb": 8}, "users": ["bob"]}])
def test_a_shape_beyond_the_queues_borrowing_limit_is_passed_over(queued_zen):  # noqa: F811
    """team-a holds its whole nominal A100 quota and may borrow none: team-b's idle A100s are no room
    for it, its free L4 quota is."""
    zen, functions = queued_zen
    for n in (1, 2):
        functions.submit(job_request(f"a{n}"))
    functions.submit(fungible("flex", ["nvidia-tesla-a100", "nvidia-l4"]))
    assert placed(zen, "flex") == ("1xl4", "QUEUED", "submitted; GPU shape 1xl4 (4xa100-40gb: queue team-a has no "
                                   "quota free (8 GPUs held, at most 8 with borrowing))")


def test_regions_no_acceptable_shape_uses_are_refused_as_with_one_cluster(functions, zen):
    """With ``cluster``, an unknown region is refused; with ``gpu_types`` it was dropped in silence,
    so a typo (``mars-north1``) ran the job only in the other regions listed."""
    functions.submit(fungible("f5", ["nvidia-tesla-a100", "nvidia-l4"], regions=["mars-north1", "europe-west4"]))
    functions.submit(fungible("f6", ["nvidia-tesla-a100", "nvidia-l4"], regions=["us-east4", "us-west1"]))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "f5") is None
        [rejection] = repository.list_rejections(session)
        accepted = repository.get_job(session, "f6")
    assert rejection["reason"] == (
        "regions ['mars-north1'] are not used by the clusters of the acceptable GPU shapes (their regions: "
        "4xa100-40gb: ['us-central1', 'us-west1', 'europe-west4']; 1xl4: ['us-central1', 'us-east4', 'europe-west4'])")
    assert (accepted.cluster, accepted.regions) == ("4xa100-40gb", ["us-west1"])  # each shape keeps its own


def test_a_job_without_max_runtime_s_gets_the_configured_cap(functions, zen, publisher):
    """limits.max_runtime_s capped what a request asked for, but a request that asked for nothing ran
    without any limit: the cap is now its limit, which the agent enforces from the start message."""
    functions.submit(job_request("forever"))
    functions.submit(job_request("short", max_runtime_s=60))
    functions.submit(job_request("forever"))  # a redelivery: still the same request, not a reuse
    with zen.db.transaction() as session:
        assert repository.get_job(session, "forever").max_runtime_s == zen.config.limits.max_runtime_s == 604800
        assert repository.get_job(session, "short").max_runtime_s == 60
        assert repository.list_rejections(session) == []
    starts = {json.loads(m.data)["job_id"]: json.loads(m.data) for m in publisher.on("zen-job-start")}
    assert (starts["forever"]["max_runtime_s"], starts["short"]["max_runtime_s"]) == (604800, 60)
