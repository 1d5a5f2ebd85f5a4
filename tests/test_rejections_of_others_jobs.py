"""Whose a rejection is (``zen.jobs.rejections``, ZEN_AUTH=required, through the functions): a message refused because
its sender is not proven, may not act on the job it names, or names another user's job, is recorded and announced
with that id in ``named_job_id`` alone, never as that job's: a subscriber following Alice's job on
``zen-job-events`` (``attributes.job_id``) hears no "job.rejected" of it from Bob's messages, and ``zen jobs get`` /
``zen logs -f`` of an id whose job is still on its way do not say it was refused. The owner's own refused message
still reaches the owner, and each sender still finds their own refusal by its message id (``zen submit --wait``)."""

from __future__ import annotations

import json

from tests.test_submitters import ALICE, BOB, a100s, send, sign, zen  # noqa: F401  (fixtures)
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from zen.cli.follow import JobStatusSource
from zen.cli.kit import no_job
from zen.store import repository

REFUSALS = ("job.rejected", "job.message_ignored")


def refusal_events(publisher) -> list[tuple[dict, dict]]:
    """(payload, attributes) of each rejection announced on zen-job-events."""
    return [(json.loads(m.data), m.attributes) for m in publisher.on("zen-job-events")
            if json.loads(m.data)["type"] in REFUSALS]


def rows(zen) -> list[dict]:
    with zen.db.transaction() as session:
        return repository.list_rejections(session)


def test_another_users_messages_naming_a_job_are_not_announced_as_that_jobs(functions, zen, publisher, sign):
    assert send(functions, "on_job_submitted", a100s("alice-7", ALICE), sign(ALICE)) == 200
    forged = [
        ("on_stop_requested", {"job_id": "alice-7"}, sign(BOB)),  # Bob may not stop it
        ("on_stop_requested", {"job_id": "alice-7"}, {}),  # no proof of its sender
        ("on_job_submitted", a100s("alice-7", BOB), sign(BOB)),  # her id, his request
        ("on_job_submitted", a100s("alice-7", ALICE, priority=1), sign(BOB)),  # as Alice
        ("on_job_submitted", a100s("alice-7", ALICE, priority=2), {}),  # no proof
    ]
    for target, payload, attributes in forged:
        assert send(functions, target, payload, attributes) == 200
    events = refusal_events(publisher)
    assert len(events) == len(forged) == len(rows(zen))
    assert [(e.get("job_id"), a.get("job_id")) for e, a in events] == [(None, None)] * len(forged), events
    assert {(e["named_job_id"], a["named_job_id"]) for e, a in events} == {("alice-7", "alice-7")}
    assert all("attempt" not in e and "cluster" not in e for e, _ in events)  # nothing of her job's
    assert [(r["job_id"], r["named_job_id"]) for r in rows(zen)] == [(None, "alice-7")] * len(forged)
    with zen.db.transaction() as session:
        assert repository.latest_rejection(session, "alice-7") is None
        assert repository.get_job(session, "alice-7").status.value == "QUEUED"


def test_an_unproven_message_naming_a_job_on_its_way_does_not_say_it_was_refused(functions, zen, publisher, sign):
    """`zen jobs get` and `zen logs -f` of an id with no job yet say Zen's latest refusal of a message for it: one
    anybody sent without proof, naming the id Alice is about to use, told her that her job was refused."""
    assert send(functions, "on_job_submitted", a100s("nightly-7", ALICE), {}) == 200
    assert send(functions, "on_stop_requested", {"job_id": "nightly-7"}, {"zen_auth": "not.a.jwt"}) == 200
    with zen.db.transaction() as session:
        assert no_job(session, "nightly-7", "check the id") == "no job nightly-7 (check the id)"
    assert JobStatusSource(zen.db).rejection("nightly-7") is None
    assert send(functions, "on_job_submitted", a100s("nightly-7", ALICE), sign(ALICE)) == 200
    with zen.db.transaction() as session:
        assert repository.get_job(session, "nightly-7").user_id == ALICE


def test_the_owners_own_refused_message_still_reaches_the_owner(functions, zen, publisher, sign):
    assert send(functions, "on_job_submitted", a100s("alice-8", ALICE), sign(ALICE)) == 200
    assert send(functions, "on_job_submitted", a100s("alice-8", ALICE, priority=1), sign(ALICE)) == 200
    assert send(functions, "on_stop_requested", {"job_id": "alice-9"}, sign(ALICE)) == 200  # no such job yet
    [(taken, attributes), (unknown, _)] = refusal_events(publisher)
    assert (taken["type"], taken["job_id"], attributes["job_id"]) == ("job.rejected", "alice-8", "alice-8")
    assert "already used by a different request" in taken["reason"] and "named_job_id" not in taken
    assert (unknown["type"], unknown["job_id"]) == ("job.message_ignored", "alice-9")
    with zen.db.transaction() as session:
        assert "already used by a different request" in repository.latest_rejection(session, "alice-8")["reason"]
        assert no_job(session, "alice-9", "x").startswith(f"no job alice-9: Zen refused a message for it from {ALICE} at ")


def test_a_senders_own_refusal_naming_another_users_job_is_found_by_its_message_id(functions, zen, publisher, sign):
    """`zen submit --wait` of Bob's request under Alice's id follows his message: it ends saying why it was refused."""
    assert send(functions, "on_job_submitted", a100s("shared-1", ALICE), sign(ALICE)) == 200
    response = functions.send("on_job_submitted", json.dumps(a100s("shared-1", BOB)).encode(), message_id="m-bob",
                              attributes=sign(BOB))
    assert response.status_code == 200
    status = JobStatusSource(zen.db)
    assert "another user's job" in status.rejection("shared-1", "m-bob")
    assert status.rejection("shared-1") is None and status.rejection("shared-1", "m-other") is None


def test_a_refusal_of_an_id_no_job_holds_says_who_sent_it(functions, zen, sign):
    """Anyone proven may name an id no job holds yet, and its refusal is kept under that id: what `zen jobs get` and
    `zen logs -f` say of the id names the sender, so its owner-to-be does not take another's refusal for their own."""
    assert send(functions, "on_stop_requested", {"job_id": "nightly-8"}, sign(BOB)) == 200
    with zen.db.transaction() as session:
        said = no_job(session, "nightly-8", "x")
    assert said.startswith(f"no job nightly-8: Zen refused a message for it from {BOB} at "), said
