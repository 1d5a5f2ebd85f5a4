"""A job's notices reach each target in the job's order: its end never before a preemption it had, even when the
preemption's first POST failed and its event waits for Pub/Sub's redelivery (10 s doubling to 600 s) while the
end's event comes and finds the endpoint answering again."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.test_notifications import deliver, events, hook, ledger, notifying, secret_manager, sink  # noqa: F401


def job_request_notifying(config, job_id):
    return job_request(job_id, notify=[hook(config, on=["PREEMPTED", "SUCCEEDED"])])


def preempted_then_succeeded(functions, clock, job_id):
    """Attempt 1 preempted (its spot VM taken), attempt 2 run to SUCCEEDED."""
    for status, seq in (("CLAIMED", 1), ("RUNNING", 2), ("PREEMPTED", 3)):
        functions.heartbeat(heartbeat(job_id, status, seq, vm="vm-1"))
    clock.advance(60)
    for status, seq in (("CLAIMED", 1), ("RUNNING", 2), ("SUCCEEDED", 3)):
        functions.heartbeat(heartbeat(job_id, status, seq, attempt=2, vm="vm-2", exit_code=0))


def notices(publisher, job_id):
    """The job's zen-job-events messages that are a notice: the LOST of attempt 1, then the SUCCEEDED."""
    wanted = ("LOST", "SUCCEEDED")
    found = {json.loads(m.data).get("to_status"): m for m in events(publisher) if json.loads(m.data)["job_id"] == job_id}
    return [found[status] for status in wanted]


def answered(sink):  # noqa: F811 - the sink fixture's WebhookSink
    """(notice, attempt) of each POST the hook took (answered 200), in the order it took them."""
    return [(r["body"]["event"], r["body"]["attempt"]) for r in sink.on("hook") if r["answer"] == 200]


def test_an_end_is_not_told_before_the_preemption_whose_post_failed(notifying, publisher, sink, config, clock):
    zen, functions = notifying
    functions.submit(job_request_notifying(config, "ord-1"))
    preempted_then_succeeded(functions, clock, "ord-1")
    lost, succeeded = notices(publisher, "ord-1")
    sink.script = [500]  # the endpoint fails the preemption's first POST, then is back

    first = deliver(functions, lost, "lost-1")
    clock.advance(5)
    end = deliver(functions, succeeded, "end-1")  # the end's event comes before the preemption's redelivery
    clock.advance(30)
    again = deliver(functions, lost, "lost-1")  # Pub/Sub redelivers the preemption

    assert (first.status_code, end.status_code, again.status_code) == (500, 200, 200)
    assert answered(sink) == [("PREEMPTED", 1), ("SUCCEEDED", 2)]
    preemption_posts = [r for r in sink.on("hook") if r["body"]["event"] == "PREEMPTED"]
    assert len({r["headers"]["Zen-Delivery"] for r in preemption_posts}) == 1  # the same notice, its id kept
    assert sorted((r["event"], r["state"]) for r in ledger(zen, "ord-1")) == [("PREEMPTED", "sent"),
                                                                             ("SUCCEEDED", "sent")]


def test_an_end_waits_while_the_preemption_before_it_still_fails(notifying, publisher, sink, config, clock):
    zen, functions = notifying
    functions.submit(job_request_notifying(config, "ord-2"))
    preempted_then_succeeded(functions, clock, "ord-2")
    lost, succeeded = notices(publisher, "ord-2")
    sink.script = [500, 500]  # the preemption's POST fails, and again when the end's delivery tries it first

    codes = [deliver(functions, lost, "lost-1").status_code, deliver(functions, succeeded, "end-1").status_code]
    clock.advance(30)
    codes += [deliver(functions, succeeded, "end-1").status_code, deliver(functions, lost, "lost-1").status_code]

    assert codes == [500, 500, 200, 200]
    assert [r["body"]["event"] for r in sink.on("hook")] == ["PREEMPTED", "PREEMPTED", "PREEMPTED", "SUCCEEDED"]
    assert answered(sink) == [("PREEMPTED", 1), ("SUCCEEDED", 2)]
