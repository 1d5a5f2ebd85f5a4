"""What the console shows a viewer of jobs they may not see, and what others may write into a job's output
stream: a preempted job's page names its preemptor by queue and size (its id is another queue's members'
alone), and neither a client's resume point nor a log entry's VM label writes fields into the stream."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pytest

from tests.console.test_console_app import setup  # noqa: F401 - fixture
from tests.messages import agent_run, heartbeat, job_request
from tests.test_queues import RECLAIM, borrow_all_and_reclaim, queued_zen, statuses  # noqa: F401 - fixture
from zen.adapters.joblogs import LocalSink, OutputEntry
from zen.console.app import create_app
from zen.console.viewers import LOCAL_HEADER, local_identity


def page(client, url, who, status=200):
    answer = client.get(url, headers={LOCAL_HEADER: who})
    text = answer.get_data(as_text=True)
    assert answer.status_code == status, text
    return text


# Each queue its members' alone (submitters named): alice is team-a's, bob team-b's.
MEMBERS = [{**RECLAIM[0], "submitters": ["alice"]}, {**RECLAIM[1], "submitters": ["bob"]}]


@pytest.mark.queues(MEMBERS)
def test_a_preempted_jobs_page_names_the_preemptor_of_a_queue_the_viewer_is_not_in(queued_zen, clock):
    """team-b (bob's) reclaims its lent quota: alice's a3 (team-a) is preempted for bob's b1. alice may not see
    b1 (404, "the same answer as an id that does not exist"), yet a3's page (history) names it."""
    zen, functions = queued_zen
    borrow_all_and_reclaim(functions, clock)  # a0..a3 alice's in team-a; b1 bob's in team-b
    assert statuses(zen, "b1", "a3") == ["PENDING", "STOPPING"]
    client = create_app(zen.config, zen.db, local_identity("alice"), clock=clock).test_client()
    assert "no job b1 that alice may see" in page(client, "/jobs/b1", "alice", status=404)
    html = page(client, "/jobs/a3", "alice") + page(client, "/jobs/a3?fragment=1", "alice")
    assert "job b1" not in html and "a 4-GPU job of queue team-b" in html  # it named b1, which alice may not see


def test_the_resume_point_cannot_inject_events_into_the_output_stream(setup, clock):
    _, functions, client, logs = setup
    functions.submit(job_request("a1", user_id="alice"))
    for beat in agent_run("a1", vm="vm-a"):
        functions.heartbeat(beat)
        clock.advance(30)
    LocalSink(logs).write([OutputEntry("a1", 1, "stdout", "vm-a", 1, "t", "real line")])
    forged = "1:x\nevent: line\ndata: {\"attempt\": 1, \"stream\": \"stdout\", \"vm\": \"vm-a\", \"text\": \"FORGED\"}\n\nid: 1:x=0"
    stream = client.get("/jobs/a1/output?after=" + quote(forged)).get_data(as_text=True)
    assert "FORGED" not in stream, stream
    for event_id in re.findall(r"^id: (.*)$", stream, re.M):
        assert "\n" not in event_id and "\r" not in event_id


def test_an_output_entrys_vm_label_cannot_inject_events_into_the_output_stream(setup, clock):
    """An entry's vm is a Cloud Logging label (written by whatever may write the project's logs, a job's VM
    among them); it went into the event's ``id:`` line as it was: a newline in it starts new SSE fields."""
    _, functions, client, logs = setup
    functions.submit(job_request("a1", user_id="alice"))
    for beat in agent_run("a1", vm="vm-a"):
        functions.heartbeat(beat)
        clock.advance(30)
    vm = 'vm-a\nevent: end\ndata: {"status": "FORGED"}\n\nid: 1:vm-a'
    LocalSink(logs).write([OutputEntry("a1", 1, "stdout", vm, 1, "t", "a line"),
                           OutputEntry("a1", 1, "stdout", "vm-a", 2, "t", "the last line")])
    stream = client.get("/jobs/a1/output").get_data(as_text=True)
    assert "FORGED" not in stream.replace('\\"FORGED\\"', ""), stream  # only as JSON-escaped data, never a field
    assert not re.search(r"^data: \{\"status\": \"FORGED\"\}$", stream, re.M), stream


@pytest.mark.queues(MEMBERS)
def test_a_job_offered_ahead_of_another_queues_claim_names_that_job_by_its_queue(queued_zen, publisher, clock):
    """A VM's claim of alice's low (team-a) gives way to bob's high (team-b, priority 5): high is offered to the VM.
    bob may not see low (404), yet high's page (its history) named it; and the refusal announced of alice's low named
    bob's high. Each names the other by its queue and priority."""
    zen, functions = queued_zen
    functions.submit(job_request("low", user_id="alice"))
    clock.advance(1)
    functions.submit(job_request("high", user_id="bob", priority=5))
    functions.heartbeat(heartbeat("low", "CLAIMED", 1, vm="vm-a", gives_way=True))
    assert statuses(zen, "low", "high") == ["QUEUED", "QUEUED"]
    client = create_app(zen.config, zen.db, local_identity("bob"), clock=clock).test_client()
    assert "no job low that bob may see" in page(client, "/jobs/low", "bob", status=404)
    html = page(client, "/jobs/high", "bob") + page(client, "/jobs/high?fragment=1", "bob")
    assert "start offered to VM vm-a first" in html
    assert "job low" not in html and "ahead of a job of queue team-a (priority 0)" in html  # it named low
    [ignored] = [json.loads(m.data) for m in publisher.on("zen-job-events")
                 if m.attributes["type"] == "job.message_ignored" and json.loads(m.data)["job_id"] == "low"]
    assert "high" not in ignored["reason"] and ignored["reason"].startswith("a job of queue team-b (priority 5) waits")
