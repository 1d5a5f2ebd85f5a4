"""A job_id another user took first (ZEN_AUTH=required, through the functions): job ids are one namespace for every
user, so the second submission is refused, saying the id is another user's (not whose) and what to do; the first
keeps it. docs/explanations/security.md says so beside its advice to give submissions an id."""

from __future__ import annotations

from tests.test_submitters import ALICE, BOB, a100s, refusals, send, sign, zen  # noqa: F401  (fixtures)
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from zen.store import repository


def test_a_job_id_another_user_took_is_refused_saying_so(functions, zen, sign):
    assert send(functions, "on_job_submitted", a100s("nightly-2026-01-01", BOB), sign(BOB)) == 200
    assert send(functions, "on_job_submitted", a100s("nightly-2026-01-01", ALICE), sign(ALICE)) == 200
    with zen.db.transaction() as session:
        assert repository.get_job(session, "nightly-2026-01-01").user_id == BOB
    [why] = [why for _, why in refusals(zen) if "nightly-2026-01-01" in why]
    assert "another user's job" in why and BOB not in why and "an id of your own" in why, why
