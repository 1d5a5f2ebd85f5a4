"""End to end through the local Google Cloud: a JobRequest published with the official client reaches
``on_job_submitted`` (functions-framework, its own process, built from the environment as on Cloud
Functions) through the event bridge, lands in Postgres, and its start message reaches Pub/Sub."""

from __future__ import annotations

import json
import time

import pytest
from google.cloud import pubsub_v1

from tests.local.test_bridge import FAST
from tests.waiting import wait_for
from tests.messages import job_request
from zen.store import repository
from zen_dev.local.bridge import EventBridge, Route
from zen_dev.local.functions_server import FunctionServer


@pytest.fixture
def submitted_function(db_url, config, publisher, pubsub_server, tmp_path):
    env = {"ZEN_DATABASE_URL": db_url, "ZEN_PROJECT": config.project, "PUBSUB_EMULATOR_HOST": pubsub_server.address,
           "ZEN_SCALING": "off"}  # no Compute here: scaling has its own tests
    with FunctionServer("on_job_submitted", env=env, log_path=tmp_path / "function.log") as server:
        with EventBridge(config.project, [Route(config.topics.job_submitted, server.url)], FAST):
            yield server


def get_job(db, job_id):
    with db.transaction() as session:
        return repository.get_job(session, job_id)


def test_published_job_request_is_queued_and_its_start_message_published(submitted_function, config, db,
                                                                         publisher, pubsub_clients):
    client = pubsub_clients[0]
    topic = client.topic_path(config.project, config.topics.job_submitted)
    client.publish(topic, json.dumps(job_request("e2e-1")).encode()).result(10)

    job = wait_for(lambda: get_job(db, "e2e-1"))
    wait_for(lambda: publisher.on("zen-job-start"))
    assert job.status.value in ("PENDING", "QUEUED")
    assert get_job(db, "e2e-1").status.value == "QUEUED"
    [start] = publisher.on("zen-job-start")
    assert json.loads(start.data)["job_id"] == "e2e-1" and start.attributes["cluster"] == "4xa100-40gb"


def test_poison_message_is_rejected_once_and_not_retried(submitted_function, config, db, pubsub_clients, tmp_path):
    client = pubsub_clients[0]
    topic = client.topic_path(config.project, config.topics.job_submitted)
    client.publish(topic, b"{this is not json").result(10)

    def rejected():
        with db.transaction() as session:
            return repository.list_rejections(session)

    [row] = wait_for(rejected)
    assert "not valid UTF-8 JSON" in row["reason"]
    time.sleep(1.0)  # a nacked message would be back within the bridge's 0.1-0.4 s backoff
    lines = [json.loads(line) for line in (tmp_path / "function.log").read_text().splitlines() if line.startswith("{")]
    messages = [line["message"] for line in lines if not line["message"].startswith("ZEN_VM_PROOF=off")]
    assert messages == ["message rejected"]  # delivered once: acked, not retried (besides the start's proof warning)
