"""Every bad input is rejected with a specific reason, recorded once, announced, acked (HTTP 200),
and changes nothing else. A database outage is not a bad input: it answers 500 so Pub/Sub retries."""

from __future__ import annotations

import json

import pytest

from tests.messages import heartbeat, job_request
from zen.store import repository


def snapshot(zen):
    with zen.db.transaction() as session:
        jobs = [j.model_dump() for j in repository.list_jobs(session)]
        history = session.sql("SELECT job_id, to_status FROM job_events ORDER BY id")
        rejected = repository.list_rejections(session)
    return jobs, history, rejected


def rejected_events(publisher):
    return [json.loads(m.data) for m in publisher.on("zen-job-events")
            if json.loads(m.data)["type"] in ("job.rejected", "job.message_ignored")]


BAD_SUBMISSIONS = [
    (b"{not json", "not valid UTF-8 JSON"),
    (b"\xff\xfe", "not valid UTF-8 JSON"),
    (b"[1, 2]", "must be a JSON object"),
    # json keeps the last of two equal keys: which one the sender meant is not Zen's to guess
    (json.dumps(job_request("j", provisioning="spot"))[:-1].encode() + b', "provisioning": "standard"}',
     "payload JSON: key 'provisioning' is given twice in one object (keep one)"),
    (json.dumps(job_request("j", comand=["x"])).encode(), "comand: Extra inputs are not permitted (did you mean command?)"),
    (json.dumps(job_request("j", priority="high")).encode(), "priority: Input should be a valid integer"),
    (json.dumps(job_request("j", command="python train.py")).encode(), "command: Input should be a valid list"),
    (json.dumps(job_request("j", cluster="9xh100")).encode(), "unknown cluster '9xh100'"),
    (json.dumps(job_request("j", cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=16)).encode(),
     "no cluster has 16 or more nvidia-tesla-a100 GPUs"),
    (json.dumps(job_request("j", command=[])).encode(), "command must be a non-empty list"),
    (json.dumps(job_request("j", command=None)).encode(), "give an image, a command"),
    (json.dumps(job_request("j", regions=["mars-north1"])).encode(), "not used by cluster 4xa100-40gb"),
    (json.dumps(job_request("j", max_attempts=99)).encode(), "max_attempts 99 is above the limit 10"),
    (json.dumps(job_request("bad id with spaces")).encode(), "job_id must be"),
    (json.dumps(job_request("train-42\n")).encode(), "job_id: job_id must be"),  # "$" took the "\n"
    (json.dumps(job_request("j", version=2)).encode(), "unsupported message version 2"),
    (json.dumps(job_request("j", env={"X": "y" * 70_000})).encode(), "the limit is 65536"),
    # docker run's options are not images: each would run among them (the command's first word as the image)
    (json.dumps(job_request("j", image="--privileged", command=["ubuntu", "sh"])).encode(),
     "image '--privileged' starts with '-', which docker run would read as one of its options"),
    (json.dumps(job_request("j", image="--volume=/:/host", command=["ubuntu", "cat", "/host/etc/shadow"])).encode(),
     "image '--volume=/:/host' starts with '-'"),
    (json.dumps(job_request("j", image="Team/Train:1")).encode(), "the repository path must be lowercase"),
]


@pytest.mark.parametrize("payload, reason", BAD_SUBMISSIONS, ids=[r for _, r in BAD_SUBMISSIONS])
def test_bad_submission_is_rejected_and_acked(functions, zen, publisher, payload, reason):
    response = functions.send("on_job_submitted", payload, message_id="bad-1")
    assert response.status_code == 200
    jobs, history, rejected = snapshot(zen)
    assert jobs == [] and history == []
    assert len(rejected) == 1 and reason in rejected[0]["reason"], rejected
    assert publisher.on("zen-job-start") == []
    [event] = rejected_events(publisher)
    assert event["type"] == "job.rejected" and reason in event["reason"]
    # Redelivered: still acked, recorded once, announced once.
    assert functions.send("on_job_submitted", payload, message_id="bad-1").status_code == 200
    assert len(snapshot(zen)[2]) == 1 and len(rejected_events(publisher)) == 1


def test_gpu_type_and_count_map_to_the_smallest_fitting_cluster(functions, zen):
    functions.submit(job_request("j5", cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=5))
    functions.submit(job_request("j2", cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=2))
    with zen.db.transaction() as session:
        assert repository.get_job(session, "j5").cluster == "8xa100-40gb"
        assert repository.get_job(session, "j2").cluster == "4xa100-40gb"


def test_malformed_envelope_is_rejected_and_acked(functions, zen):
    event = {"specversion": "1.0", "id": "e1", "source": "//pubsub.googleapis.com/x",
             "type": "google.cloud.pubsub.topic.v1.messagePublished", "datacontenttype": "application/json",
             "data": {"message": {"data": "!!!not base64!!!", "messageId": "e1"}}}
    assert functions.post("on_job_submitted", event).status_code == 200
    _, _, [rejected] = snapshot(zen)
    assert rejected["reason"] == "message.data is not valid base64"


@pytest.mark.parametrize("mutate, reason", [
    (lambda hb: hb.update(job_id="nobody"), "unknown job nobody"),
    (lambda hb: hb.update(status="DANCING"), "status: Input should be"),
    (lambda hb: hb.update(seq=0), "seq: Input should be greater than or equal to 1"),
    (lambda hb: hb.pop("attempt"), "attempt: Field required"),
    (lambda hb: hb.update(attempt=7), "heartbeat for attempt 7, but the job is at attempt 1"),
])
def test_bad_heartbeat_is_rejected_and_changes_nothing(functions, zen, publisher, mutate, reason):
    functions.submit(job_request("job-1"))
    before = snapshot(zen)
    beat = heartbeat("job-1", "CLAIMED", 1)
    mutate(beat)
    assert functions.send("on_heartbeat", beat).status_code == 200
    jobs, history, rejected = snapshot(zen)
    assert (jobs, history) == before[:2]
    assert len(rejected) == 1 and reason in rejected[0]["reason"], rejected
    assert reason in rejected_events(publisher)[0]["reason"]
    assert publisher.on("zen-vm-control") == []


def test_stale_attempt_is_rejected_and_its_vm_released(functions, zen, publisher, clock):
    functions.submit(job_request("job-1"))
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-a"))
    clock.advance(500)
    functions.tick()  # lost -> attempt 2
    before = snapshot(zen)
    functions.heartbeat(heartbeat("job-1", "CLAIMED", 1, vm="vm-b"))  # vm-b pulled attempt 1 late
    jobs, history, rejected = snapshot(zen)
    assert (jobs, history) == before[:2]
    assert "stale attempt 1: the job is at attempt 2" in rejected[-1]["reason"]
    last = json.loads(publisher.on("zen-vm-control")[-1].data)
    assert (last["vm"], last["action"], last["attempt"]) == ("vm-b", "RELEASE", 1)


def test_transition_the_table_forbids_is_rejected(functions, zen, publisher):
    functions.submit(job_request("job-1"))
    functions.stop({"job_id": "job-1"})
    before = snapshot(zen)
    functions.heartbeat(heartbeat("job-1", "SUCCEEDED", 5, vm="vm-x", exit_code=0))
    jobs, history, rejected = snapshot(zen)
    assert (jobs, history) == before[:2]
    assert "transition CANCELLED -> SUCCEEDED is not allowed" in rejected[-1]["reason"]


def test_stop_for_unknown_job_is_rejected(functions, zen, publisher):
    functions.stop({"job_id": "ghost", "reason": "oops"})
    _, _, [rejected] = snapshot(zen)
    assert rejected["reason"].startswith("unknown job ghost") and rejected["source"] == "zen-job-stop"
    assert rejected_events(publisher)[0]["job_id"] == "ghost"


def test_database_outage_answers_500_so_pubsub_redelivers(functions, zen, db_target, pg_server):
    # Take the test database away mid-flight: terminate every connection and forbid new ones.
    from zen.store.db import Database

    admin = Database.from_target(pg_server)
    with admin.session() as session:
        session.execute(f"ALTER DATABASE {db_target.database} ALLOW_CONNECTIONS false")
        session.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d",
                    d=db_target.database)
    try:
        response = functions.send("on_job_submitted", job_request("job-1"), message_id="m-outage")
        assert response.status_code == 500
    finally:
        with admin.session() as session:
            session.execute(f"ALTER DATABASE {db_target.database} ALLOW_CONNECTIONS true")
        admin.close()
    # Redelivery after the outage succeeds, exactly once.
    functions.submit(job_request("job-1"), message_id="m-outage")
    jobs, _, rejected = snapshot(zen)
    assert [j["status"].value for j in jobs] == ["QUEUED"] and rejected == []


def test_rejection_is_a_structured_log_line_with_the_reason(functions, caplog):
    import logging

    from zen.logs import JsonFormatter

    with caplog.at_level(logging.WARNING, logger="zen"):
        functions.send("on_job_submitted", job_request("j", cluster="9xh100"), message_id="m-log")
    [record] = [r for r in caplog.records if r.getMessage() == "message rejected"]
    line = json.loads(JsonFormatter().format(record))
    assert line["severity"] == "WARNING" and line["message_id"] == "m-log" and line["job_id"] == "j"
    assert line["reason"].startswith("unknown cluster '9xh100'")


ODD_HEARTBEATS = [
    ({"sent_at": "2026-01-01T00:00:00"}, "sent_at: Input should have timezone info"),
    ({"exit_code": 2**40}, "exit_code: Input should be less than or equal to 2147483647"),
    ({"seq": 2**70}, "seq: Input should be less than or equal to"),
    ({"vm": "vm\u0000x"}, "vm contains a NUL character"),
    ({"message": {"nested": "object"}}, "message: Input should be a valid string"),
]


@pytest.mark.parametrize("change, reason", ODD_HEARTBEATS, ids=[r for _, r in ODD_HEARTBEATS])
def test_odd_but_json_valid_heartbeats_are_rejected_not_retried(functions, zen, change, reason):
    functions.submit(job_request("job-1"))
    beat = heartbeat("job-1", "CLAIMED", 1) | change
    assert functions.send("on_heartbeat", beat).status_code == 200
    _, _, rejected = snapshot(zen)
    assert reason in rejected[-1]["reason"], rejected


@pytest.mark.parametrize("raw, reason", [
    (b'{"user_id": "a", "priority": 1' + b"1" * 5000 + b"}", "beyond Zen's limits"),
    (b"[" * 30000 + b"]" * 30000, "beyond Zen's limits"),
    (rb'{"job_id": "\u0000", "user_id": "a"}', "NUL character"),
    (json.dumps(job_request("j", env={"A": "b\u0000c"})).encode(), "env.A contains a NUL character"),
], ids=["huge number", "deep nesting", "NUL job_id", "NUL env value"])
def test_payloads_beyond_the_parser_or_postgres_are_rejected(functions, zen, raw, reason):
    assert functions.send("on_job_submitted", raw).status_code == 200
    jobs, _, rejected = snapshot(zen)
    assert jobs == [] and reason in rejected[-1]["reason"], rejected


# -- Issue 10's reproducers: each answered 500 on every delivery before -----------------------------
def vm_heartbeat(**overrides) -> dict:
    beat = {"kind": "vm", "vm": "vm-a", "cluster": "4xa100-40gb", "region": "us-central1", "zone": "us-central1-a",
            "state": "IDLE", "seq": 1, "sent_at": "2026-11-21T10:00:00Z"}
    return beat | overrides


@pytest.mark.parametrize("target, raw, reason", [
    ("on_stop_requested", rb'{"job_id": "j1", "\u0000": 1}', "key \\x00 contains a NUL character"),
    ("on_job_submitted", json.dumps(job_request("j1", env={"B\u0000": "v"})).encode(),
     "key env.B\\x00 contains a NUL character"),
    ("on_heartbeat", json.dumps(vm_heartbeat(sent_at="9999-12-31T23:59:59-14:00")).encode(),
     "sent_at: is outside the range of UTC timestamps"),
    ("on_heartbeat", json.dumps(vm_heartbeat(sent_at="0001-01-01T00:00:00+14:00")).encode(),
     "sent_at: is outside the range of UTC timestamps"),
    ("on_heartbeat", json.dumps(vm_heartbeat(zone="\ud800")).encode(),
     "zone contains a lone UTF-16 surrogate"),
    ("on_heartbeat", json.dumps(vm_heartbeat(**{"\ud800": 1})).encode(),
     "key \\ud800 contains a lone UTF-16 surrogate"),
], ids=["NUL key in a stop", "NUL key in env", "sent_at beyond 9999 in UTC", "sent_at before year 1 in UTC",
        "lone surrogate in a VM heartbeat", "lone surrogate in a key"])
def test_content_that_broke_the_rejection_or_the_driver_is_rejected_once(functions, zen, publisher, target, raw,
                                                                        reason):
    for _ in range(2):  # a redelivery is acked again, recorded once
        assert functions.send(target, raw, message_id="m-hostile").status_code == 200
    jobs, _, rejected = snapshot(zen)
    assert jobs == [] and len(rejected) == 1 and reason in rejected[0]["reason"], rejected
    [event] = rejected_events(publisher)
    assert reason in event["reason"]  # published: the escaped reason is valid UTF-8 JSON


def _random_text(n: int) -> str:
    import random
    import string

    rnd = random.Random(n)  # random, so that Postgres cannot compress it under its index row limit
    return "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(n))


@pytest.mark.parametrize("change, reason, kind", [
    ({"region": _random_text(6000)}, "region: String should have at most 64 characters", "malformed"),
    ({"zone": _random_text(6000)}, "zone: String should have at most 64 characters", "malformed"),
    ({"region": "mars-north1"}, "VM vm-a in region 'mars-north1': cluster 4xa100-40gb does not use that region "
                                "(its regions: ['us-central1', 'us-west1', 'europe-west4'])", "forbidden"),
], ids=["6000-character region (answered 500 forever)", "6000-character zone", "a region the cluster does not use"])
def test_a_vm_heartbeat_from_nowhere_its_cluster_runs_is_rejected_once(functions, zen, publisher, change, reason,
                                                                       kind):
    from zen import telemetry

    for _ in range(2):  # a redelivery is acked again, recorded once
        assert functions.send("on_heartbeat", vm_heartbeat(**change), message_id="m-vm").status_code == 200
    _, _, rejected = snapshot(zen)
    assert len(rejected) == 1 and reason in rejected[0]["reason"], rejected
    assert telemetry.reason_class(rejected[0]["reason"]) == kind  # the operator's metric label
    assert reason in rejected_events(publisher)[0]["reason"]
    with zen.db.transaction() as session:
        assert session.sql("SELECT name FROM vms") == []


@pytest.mark.parametrize("change, reason", [
    ({"priority": "1"}, "priority: Input should be a valid integer"),
    ({"priority": True}, "priority: Input should be a valid integer, not True"),
    ({"max_attempts": True}, "max_attempts: Input should be a valid integer"),
    ({"max_runtime_s": "60"}, "max_runtime_s: Input should be a valid integer of seconds, not '60'"),
    ({"max_start_wait_s": "10m"}, "max_start_wait_s: Input should be a valid integer of seconds, not '10m'"),
    ({"max_runtime_s": 60.0}, "max_runtime_s: Input should be a valid integer"),
    ({"user_id": 42}, "user_id: Input should be a valid string"),
])
def test_wrong_json_types_are_refused_not_coerced(functions, zen, change, reason):
    assert functions.send("on_job_submitted", job_request("j1", **change)).status_code == 200
    jobs, _, rejected = snapshot(zen)
    assert jobs == [] and reason in rejected[0]["reason"], rejected


def test_numeric_sent_at_is_refused(functions, zen):
    functions.submit(job_request("job-1"))
    assert functions.send("on_heartbeat", heartbeat("job-1", "CLAIMED", 1) | {"sent_at": 1_790_000_000}).status_code == 200
    _, _, rejected = snapshot(zen)
    assert "sent_at: must be an ISO 8601 string" in rejected[-1]["reason"], rejected


@pytest.mark.parametrize("event_type", ["", "google.cloud.storage.object.v1.finalized"])
def test_a_cloudevent_of_another_or_no_type_is_rejected(functions, zen, event_type):
    event = functions.event("on_job_submitted", job_request("j1"), message_id="m-type")
    event["type"] = event_type
    assert functions.post("on_job_submitted", event, binary=True).status_code == 200
    jobs, _, [rejected] = snapshot(zen)
    assert jobs == [] and rejected["reason"].startswith("unexpected CloudEvent type"), rejected


def test_a_message_id_that_cannot_be_a_job_id_needs_an_explicit_job_id(functions, zen):
    assert functions.send("on_job_submitted", job_request(None), message_id="topic/7").status_code == 200
    jobs, _, rejected = snapshot(zen)
    assert jobs == [] and "give a job_id" in rejected[0]["reason"], rejected


def test_a_message_id_with_a_final_newline_is_not_a_job_id(functions, zen):
    """Python's "$" matches before a final "\n": the job "17\n" printed like "17" and its outputs went
    to an object name no upload could create."""
    assert functions.send("on_job_submitted", job_request(None), message_id="17\n").status_code == 200
    jobs, _, rejected = snapshot(zen)
    assert jobs == [] and "message.messageId must be 1-256 printable ASCII characters" in rejected[0]["reason"]


def test_an_outputs_prefix_must_leave_room_for_the_names_of_the_jobs_files(functions, zen):
    """Files go to <outputs>/<job_id>/attempt-<n>/<path>, an object name of at most 1024 bytes: a ~1000
    byte prefix validated, the job ran, and every upload failed. Refused at submission with the length
    that fits, whether the job id is given or is the message id; a prefix of that length is accepted."""
    prefix = "gs://zen-results/" + "/".join(["p" * 99] * 10)  # 999 bytes: a valid object name
    functions.send("on_job_submitted", job_request("longout", outputs=prefix), message_id="m-out")
    functions.send("on_job_submitted", job_request(None, outputs=prefix), message_id="12345678901234567")
    jobs, _, rejected = snapshot(zen)
    assert jobs == [] and [r["reason"] for r in rejected] == [
        "the outputs prefix is 999 bytes: each file goes to <outputs>/longout/attempt-<n>/<its path>, an object "
        "name of at most 1024 bytes, so it leaves 0 bytes for a file's path (128 needed): give a prefix of at "
        "most 868 bytes, or a shorter job_id",
        "the outputs prefix is 999 bytes: each file goes to <outputs>/12345678901234567/attempt-<n>/<its path>, "
        "an object name of at most 1024 bytes, so it leaves 0 bytes for a file's path (128 needed): give a "
        "prefix of at most 858 bytes, or a shorter job_id"]
    fits = prefix[:len("gs://zen-results/") + 868]
    functions.submit(job_request("longout", outputs=fits), message_id="m-fits")
    with zen.db.transaction() as session:
        assert repository.get_job(session, "longout").status.value == "QUEUED"
    from zen.core.gcs import OUTPUT_NAME_ROOM, output_destination, split_uri

    split_uri(output_destination(fits, "longout", 2**31 - 1) + "f" * OUTPUT_NAME_ROOM)  # an upload's name is valid


def test_a_redelivered_submission_accepted_before_a_configuration_change_is_its_duplicate(
        functions, zen, config, db, publisher, clock):
    """Pub/Sub redelivers a submission whose ack was lost after a new revision lowered max_max_attempts:
    its job lives on, so the redelivery is a duplicate, not a rejection that tells the user the running
    job was refused. A new request (or another request under that job_id) meets the new rules."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    payload = job_request("live", max_attempts=8)
    functions.submit(payload, message_id="m-1")
    tightened = config.model_copy(update={"attempts": config.attempts.model_copy(update={"max_max_attempts": 5})})
    revision = FunctionsInvoker(Zen(tightened, db, publisher, clock))
    try:
        revision.submit(payload, message_id="m-1")
        revision.submit(job_request("live", max_attempts=9), message_id="m-2")
        revision.submit(job_request("new", max_attempts=8), message_id="m-3")
    finally:
        revision.zen.relay.marks.flush()
    jobs, _, rejected = snapshot(zen)
    assert [(job["job_id"], job["status"].value) for job in jobs] == [("live", "QUEUED")]
    assert [(r["message_id"], r["reason"]) for r in rejected] == [
        ("m-2", "max_attempts 9 is above the limit 5"), ("m-3", "max_attempts 8 is above the limit 5")]
    assert [e["job_id"] for e in rejected_events(publisher)] == ["live", "new"]
