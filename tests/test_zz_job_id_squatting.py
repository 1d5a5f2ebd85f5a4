"""Another submitter takes the job_id a user chose (ZEN_AUTH=required, through the functions): the id is global, not
the user's, so Bob, who may submit, can take `nightly-2026-01-01` before Alice's scheduled submission, which is
then refused ("already used by a different request") and never runs, while a job of Bob's sits under the name
Alice's tooling follows (`zen jobs get`, `after:`, `zen logs`). docs/explanations/security.md tells users to
give submissions an id where a replay would cost, so chosen ids are the advised case. Fails today."""

from __future__ import annotations

from tests.test_queues import statuses
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from tests.test_submitters import ALICE, BOB, a100s, refusals, send, sign, zen  # noqa: F401  (fixtures)
from zen.store import repository


def test_a_job_id_another_submitter_took_first_does_not_keep_the_owners_job_from_running(functions, zen, sign):
    assert send(functions, "on_job_submitted", a100s("nightly-2026-01-01", BOB), sign(BOB)) == 200
    assert send(functions, "on_job_submitted", a100s("nightly-2026-01-01", ALICE), sign(ALICE)) == 200
    with zen.db.transaction() as session:
        job = repository.get_job(session, "nightly-2026-01-01")
    assert job.user_id == ALICE, (f"Alice's job was refused ({refusals(zen)}); the id is {job.user_id}'s "
                                  f"({statuses(zen, 'nightly-2026-01-01')[0]})")
