"""A stop of another user's array whose tasks all ended is refused and recorded with its sender and reason, as
the same stop of a job of theirs is whatever its state (docs/explanations/security.md: a stop is accepted only
from the job's owner or an admin; docs/reference/messages.md: a message that can never succeed is recorded).
Answered "0 task(s) of array ... stopped", it was neither."""

from __future__ import annotations

from tests.test_queues import statuses
from tests.test_submitters import ALICE, BOB, a100s, refusals, send, sign, zen  # noqa: F401  (fixtures)
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)


def test_another_users_stop_of_an_ended_array_is_refused_and_recorded(functions, zen, sign):
    request = {**a100s("arr", ALICE), "array": {"count": 2}}
    assert send(functions, "on_job_submitted", request, sign(ALICE)) == 200
    assert send(functions, "on_stop_requested", {"job_id": "arr"}, sign(ALICE)) == 200  # her own: both cancelled
    assert statuses(zen, "arr-0", "arr-1") == ["CANCELLED", "CANCELLED"]
    before = refusals(zen)
    assert send(functions, "on_stop_requested", {"job_id": "arr"}, sign(BOB)) == 200
    after = refusals(zen)
    assert len(after) == len(before) + 1, f"Bob's stop of Alice's array was not recorded: {after}"
    who, why = after[-1]
    assert who == BOB and f"{BOB} may not stop" in why


def test_the_same_stop_of_an_ended_job_is_refused_and_recorded(functions, zen, sign):
    """A job's stop checks its sender first, whatever the job's state."""
    assert send(functions, "on_job_submitted", a100s("a1", ALICE), sign(ALICE)) == 200
    assert send(functions, "on_stop_requested", {"job_id": "a1"}, sign(ALICE)) == 200
    assert statuses(zen, "a1") == ["CANCELLED"]
    assert send(functions, "on_stop_requested", {"job_id": "a1"}, sign(BOB)) == 200
    [(who, why)] = refusals(zen)
    assert who == BOB and f"{BOB} may not stop job a1" in why
