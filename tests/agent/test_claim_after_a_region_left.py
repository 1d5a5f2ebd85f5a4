"""A queued job whose only region the configuration dropped meanwhile, claimed by a real agent of that region (a
VM of the old MIG terraform has not destroyed yet), waits: the claim is refused, the agent runs nothing, and the
job waits, held PENDING with the reason, for a region the configuration allows (docs/how-to/operate.md). The claim
cancelled the job.

The job is submitted through this test's in-process Zen, which has the configuration as it was; the functions read
the configuration file, which has us-west1 dropped from the job's cluster; the agent keeps the old one, as a VM
booted from the old template does."""

from __future__ import annotations

import time

import pytest
import yaml

from tests.agent.conftest import CLUSTER
from tests.agent.helpers import job_command, wait_for
from tests.messages import job_request
from zen.store import repository


@pytest.fixture
def config_file(config, tmp_path):
    changed = config.model_copy(update={"clusters": [
        c.model_copy(update={"regions": [r for r in c.regions if r != "us-west1"]}) if c.name == CLUSTER else c
        for c in config.clusters]})
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(changed.model_dump(mode="json"), sort_keys=False))
    return path


def test_a_claim_from_a_dropped_region_leaves_the_job_waiting_and_unrun(scheduler, agents, functions, config, tmp_path):
    old = tmp_path / "zen-before.yaml"
    old.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    functions.submit(job_request("west-1", regions=["us-west1"], command=job_command("--print", "ran")))
    assert scheduler.job("west-1").status.value == "QUEUED"
    agent = agents.start("zen-4xa100-40gb-us-west1-abcd", region="us-west1", ZEN_CONFIG=str(old))

    wait_for(lambda: agent.said("claim refused; start message dropped"), 30, what="the agent's claim refused")
    time.sleep(2)  # a cancel, or a run, would show by now
    job = scheduler.job("west-1")
    assert (job.status.value, job.vm) == ("PENDING", None), scheduler.history("west-1")
    assert job.hold.startswith("no region of its may run it now: cluster 4xa100-40gb no longer uses region us-west1")
    assert not agent.said("job started"), agent.logs()[-5:]
    with scheduler.db.transaction() as session:
        refused = [r["reason"] for r in repository.list_rejections(session)]
    assert any("no longer uses region us-west1" in reason and "it waits" in reason for reason in refused), refused
