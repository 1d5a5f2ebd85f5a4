"""The checkpoint bucket is Zen's own (terraform/checkpoints.tf grants each cluster's agent accounts Storage Object
User on gs://<bucket>/<prefix>/<cluster>/), and a job's inputs and outputs are staged and uploaded by its VM's agent
with that same account (zen.agent.staging). So no job may name that bucket as data: accepted, a job of one user
naming another user's checkpoint as its inputs read it, and as its outputs wrote over its LATEST.json, which the
other job's next attempt restored (docs/explanations/security.md: "A job can only hurt itself")."""

from __future__ import annotations

import json

import pytest

from tests.messages import job_request
from tests.test_arrays import refusals
from zen.core.checkpoints import CheckpointConfig
from zen.core.config import load_config

VICTIM = "gs://zen-ckpt/checkpoints/4xa100-40gb/victim-1/"


@pytest.fixture
def config(project):
    return load_config().model_copy(update={"project": project,
                                            "checkpoints": CheckpointConfig(bucket="zen-ckpt", max_bytes=10**9)})


def test_a_job_may_not_name_another_jobs_checkpoint_as_its_data(functions, publisher):
    functions.submit(job_request("victim-1", checkpoint={"every": 120}))
    [start] = [json.loads(m.data) for m in publisher.on("zen-job-start")]
    assert start["checkpoint"]["uri"] == VICTIM
    functions.submit(job_request("thief-1", user_id="bob", inputs=[{"uri": VICTIM + "LATEST.json"}],
                                 outputs=VICTIM))
    thief = [json.loads(m.data) for m in publisher.on("zen-job-start") if json.loads(m.data)["job_id"] == "thief-1"]
    assert thief == [], f"accepted: inputs {thief[0].get('inputs')}, outputs {thief[0].get('outputs')}"
    assert "gs://zen-ckpt/ is Zen's checkpoint bucket" in refusals(functions.zen)[-1], refusals(functions.zen)
