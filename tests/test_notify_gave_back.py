"""A PREEMPTED notice for an attempt its VM gave back (its agent's PREEMPTED for a step the cloud failed before the
command: Secret Manager unavailable past its budget, ``zen.core.gave_back``) said "Zen job ... was preempted": untrue,
its VM was not. Its text and an email's subject now say it "was requeued", with the reason the history gives; the
notice's ``event`` stays PREEMPTED (the kind a target's ``on`` and a webhook's code match). A VM that shut down is
still told "was preempted" (tests/test_notifications.py)."""

from __future__ import annotations

import json

from tests.messages import heartbeat, job_request
from tests.notify_support import secret
from tests.test_notifications import deliver_all, events, hook, notifying, sink, secret_manager  # noqa: F401 - fixtures
from zen.core.notify import email_body

NOTE = ("zen: secret HF_TOKEN: projects/my-project/secrets/hf-token/versions/latest: Secret Manager unavailable: "
        "injected failure (requeued)")
SAID = ("VM vm-a gave the attempt back (secret HF_TOKEN: projects/my-project/secrets/hf-token/versions/latest: "
        "Secret Manager unavailable: injected failure) (no attempt spent)")


def test_an_attempt_its_vm_gave_back_is_told_requeued_not_preempted(notifying, publisher, sink, config):  # noqa: F811
    zen, functions = notifying
    slack = {"slack": f"{secret(config, 'zen-notify-slack')}/versions/latest", "on": ["PREEMPTED"]}
    functions.submit(job_request("back-1", notify=[hook(config, on=["PREEMPTED"]), slack]))
    functions.heartbeat(heartbeat("back-1", "CLAIMED", 1))
    functions.heartbeat(heartbeat("back-1", "PREEMPTED", 2, message=NOTE))
    assert set(deliver_all(functions, events(publisher))) == {200}

    [notice] = sink.on("hook")
    body = notice["body"]
    assert (body["event"], body["attempt"], body["reason"]) == ("PREEMPTED", 1, SAID)
    assert body["text"].startswith("Zen job back-1 was requeued (attempt 1"), body["text"]
    assert body["text"].endswith(f"): {SAID}; rerun as attempt 2") and "preempted" not in body["text"], body["text"]
    [message] = sink.on("slack")
    assert message["body"]["text"].startswith(":warning: Zen job back-1 was requeued (attempt 1"), message["body"]
    [lost] = [json.loads(m.data) for m in events(publisher) if m.attributes.get("status") == "LOST"]
    mail = email_body("PREEMPTED", lost, {"attempt": 2}, "zen@example.com", "alice@example.com")
    assert mail["subject"] == "Zen job back-1 was requeued", mail["subject"]


def test_a_vm_that_shut_down_is_still_told_preempted(notifying, publisher, sink, config):  # noqa: F811
    zen, functions = notifying
    functions.submit(job_request("spot-1", notify=[hook(config, on=["PREEMPTED"])]))
    functions.heartbeat(heartbeat("spot-1", "CLAIMED", 1))
    functions.heartbeat(heartbeat("spot-1", "PREEMPTED", 2, message="zen: VM vm-a shut down (SIGTERM)"))
    deliver_all(functions, events(publisher))

    [notice] = sink.on("hook")
    assert notice["body"]["text"].startswith("Zen job spot-1 was preempted (attempt 1"), notice["body"]["text"]


def test_an_attempt_lost_to_its_vms_silence_is_told_requeued_not_preempted(notifying, publisher, sink, config,  # noqa: F811
                                                                           clock):
    """A silent VM's attempt (the sweep's LOST, rerun): nothing says it was preempted; its notice said so."""
    from tests.test_late_final_reports import run_then_go_silent

    zen, functions = notifying
    functions.submit(job_request("quiet-1", notify=[hook(config, on=["PREEMPTED"])]))
    run_then_go_silent(functions, clock, "quiet-1")
    deliver_all(functions, events(publisher))

    [notice] = sink.on("hook")
    text = notice["body"]["text"]
    assert text.startswith("Zen job quiet-1 was requeued (attempt 1") and "no heartbeat from vm-a" in text, text
