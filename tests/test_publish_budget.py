"""A Pub/Sub that takes each Publish RPC and never answers it (a hung front end): a submission is committed before
it publishes, so its function waits at most the publisher's budget (``PubSubPublisher.TIMEOUT_S`` for both tries,
and ``SETTLE_S``) and leaves the outbox row for the tick. Two tries of 30 s each answered a submission after 60 s,
its function's whole timeout (terraform: 60 s for the message functions)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.messages import job_request
from zen.adapters.pubsub import PubSubPublisher
from zen.app import Zen
from zen_dev.local.invoke import FunctionsInvoker

FUNCTION_TIMEOUT_S = 60  # terraform/variables.tf: the message functions' timeout_s
RELAY_WAIT_S = 30  # zen.jobs.messaging.OutboxRelay.wait_limit_s: what a request waits for its hand-overs


@pytest.fixture
def hung_pubsub():
    """A gRPC server that takes every Publish RPC and never answers it (a hung front end)."""
    from concurrent import futures

    import grpc

    release = threading.Event()

    def publish(request, context):
        release.wait(200)
        context.abort(grpc.StatusCode.UNAVAILABLE, "hung")

    handler = grpc.method_handlers_generic_handler("google.pubsub.v1.Publisher", {
        "Publish": grpc.unary_unary_rpc_method_handler(publish, request_deserializer=lambda b: b,
                                                       response_serializer=lambda b: b)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    release.set()
    server.stop(0)


def test_a_submission_waits_on_a_hung_pubsub_no_longer_than_the_publishers_budget(config, db, clock, hung_pubsub,
                                                                                 monkeypatch, db_url):
    from google.cloud import pubsub_v1

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", hung_pubsub)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    publisher = PubSubPublisher(config.project, client=pubsub_v1.PublisherClient(), timeout_s=2)
    zen = Zen(config, db, publisher, clock)
    began = time.monotonic()
    FunctionsInvoker(zen).send("on_job_submitted", job_request("hang-2"))
    took = time.monotonic() - began
    with db.transaction() as s:
        status = s.sql("SELECT status FROM jobs WHERE job_id = 'hang-2'")
        unsent = s.sql("SELECT count(*) AS n FROM outbox WHERE sent_at IS NULL")[0]["n"]
    assert status and status[0]["status"] == "QUEUED" and unsent >= 1  # committed; the tick sends it
    assert took < 2 + PubSubPublisher.SETTLE_S + 2, f"the submission took {took:.1f} s on a 2 s budget"


def test_the_default_budget_is_well_within_a_message_functions_timeout():
    assert PubSubPublisher.TIMEOUT_S + PubSubPublisher.SETTLE_S <= RELAY_WAIT_S < FUNCTION_TIMEOUT_S
