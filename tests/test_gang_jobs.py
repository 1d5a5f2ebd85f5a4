"""Multi-node jobs (``nodes: N``, zen.core.gang), through the functions against a real Postgres: what is
refused before anything is stored (naming ``nodes``), what is stored, and GPUs counted N times over."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from tests.messages import job_request
from tests.test_usercli import user_env  # noqa: F401  (the fixture)
from tests.test_bad_input import snapshot
from zen.core.config import ZenConfig
from zen.core.errors import Rejected
from zen.core.models import JobRequest, request_fingerprint
from zen.jobs.placement import resolve_request
from zen.store import repository

CLUSTER = "4xa100-40gb"  # the default configuration: 4 GPUs per VM, max_vms 8, max_vms_per_region 4


def _with(config, clusters=None, **extra) -> ZenConfig:
    raw = json.loads(config.model_dump_json())
    for cluster in raw["clusters"]:
        cluster.update((clusters or {}).get(cluster["name"], {}))
    return ZenConfig.model_validate({**raw, **extra})


@pytest.fixture
def gang_zen(config, db, publisher, clock, db_url, monkeypatch):
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    zen = Zen(_with(config, {"1xl4": {"max_jobs_per_vm": 1}}), db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    return zen, FunctionsInvoker(zen)


def test_an_ordinary_request_keeps_its_canonical_form_and_hash():
    plain = JobRequest.model_validate(job_request("a"))
    one = JobRequest.model_validate(job_request("a", nodes=1))
    assert plain.nodes == one.nodes == 1
    assert "nodes" not in one.canonical("a")  # rows written before gangs have the same request_hash
    assert request_fingerprint(plain.canonical("a")) == request_fingerprint(one.canonical("a"))
    assert JobRequest.model_validate(job_request("a", nodes=2)).canonical("a")["nodes"] == 2


@pytest.mark.parametrize("nodes", [0, -1, 65, "2"])
def test_nodes_out_of_range_is_refused_by_the_message(nodes):
    with pytest.raises(ValidationError, match="nodes"):
        JobRequest.model_validate(job_request("a", nodes=nodes))


def test_nodes_beyond_what_the_cluster_holds_in_one_region_is_refused_naming_the_field(config):
    shared = _with(config, {"1xl4": {"max_jobs_per_vm": 4, "gpu_count": 4, "machine_type": "g2-standard-48"}})
    cases = {
        (CLUSTER, 9): f"nodes: 9 is above cluster {CLUSTER}'s max_vms (8)",
        (CLUSTER, 5): f"nodes: 5 is above cluster {CLUSTER}'s max_vms_per_region (4), and a multi-node job runs "
                      "in one region",
        ("1xl4", 2): "nodes: 2 nodes on cluster 1xl4, whose VMs run several jobs at once (max_jobs_per_vm 4)",
    }
    for (cluster, nodes), reason in cases.items():
        with pytest.raises(Rejected) as refused:
            resolve_request(shared, JobRequest.model_validate(job_request("a", cluster=cluster, nodes=nodes)))
        assert reason in refused.value.reason
    resolved = resolve_request(shared, JobRequest.model_validate(job_request("a", nodes=4)))
    assert resolved.cluster == CLUSTER


def test_a_gang_above_its_queue_quota_is_refused(config):
    queued = _with(config, queues=[{"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"]}])
    assert resolve_request(queued, JobRequest.model_validate(job_request("a", nodes=2))).queue == "research"
    with pytest.raises(Rejected) as refused:
        resolve_request(queued, JobRequest.model_validate(job_request("a", nodes=3)))
    assert refused.value.reason == (f"the job needs 12 GPUs of {CLUSTER} but queue research can never hold more "
                                    "than 8")


def test_a_refused_gang_stores_nothing_and_the_function_says_why(gang_zen):
    zen, functions = gang_zen
    response = functions.send("on_job_submitted", json.dumps(job_request("g0", nodes=9)).encode(), message_id="m1")
    assert response.status_code == 200  # refused for good: acked
    jobs, history, rejected = snapshot(zen)
    assert jobs == [] and history == []
    assert len(rejected) == 1 and "nodes: 9 is above cluster" in rejected[0]["reason"]


def test_a_gang_is_stored_with_its_nodes_and_holds_every_nodes_gpus(gang_zen, publisher):
    zen, functions = gang_zen
    functions.submit(job_request("g1", nodes=3))
    functions.submit(job_request("s1"))
    with zen.db.transaction() as session:
        gang, single = repository.get_job(session, "g1"), repository.get_job(session, "s1")
        columns = {r["job_id"]: r["nodes"] for r in session.sql("SELECT job_id, nodes FROM jobs")}
    assert (gang.status.value, gang.nodes, gang.gpus, gang.gang) == ("QUEUED", 3, 12, None)
    assert (single.nodes, single.gpus) == (1, 4)
    assert columns == {"g1": 3, "s1": 1}



def test_zen_submit_nodes_publishes_a_gang_and_refuses_one_no_region_holds(user_env, capsys):
    from zen.cli.main import main

    assert main(["submit", "--cluster", CLUSTER, "--nodes", "5", "--", "python", "x.py"]) == 1
    assert "Zen would refuse this job: nodes: 5 is above cluster 4xa100-40gb's max_vms_per_region (4)" in \
        capsys.readouterr().err
    assert user_env.on("zen-job-submitted") == []  # refused before publishing
    assert main(["submit", "--job-id", "pair", "--cluster", CLUSTER, "--nodes", "2", "--", "python", "x.py"]) == 0
    [message] = user_env.on("zen-job-submitted")
    assert json.loads(message.data)["nodes"] == 2
