"""A stop sent before its job's submit is kept and applied by whichever comes first: the submission, or the tick (a
stop that crossed its submission). Either way the job ends CANCELLED with the user's reason on its row."""

from __future__ import annotations

from tests.messages import job_request
from tests.test_functions_lifecycle import job


def test_an_early_stop_keeps_its_reason_on_the_row_whoever_applies_it(functions, zen, publisher, clock, db_url, monkeypatch, capsys):
    """The same early stop, applied at the submit (the common race) or by the tick: each leaves the user's reason on
    the row, and `zen jobs get` shows it (the submission's left none)."""
    from zen.cli.main import main

    functions.stop({"job_id": "e", "reason": "never mind"})
    functions.submit(job_request("e"))            # the kept stop is applied by the submission
    functions.submit(job_request("f"))
    with zen.db.transaction() as session:         # f's stop crossed its submission: kept, applied by the tick
        session.sql("INSERT INTO early_stops (job_id, reason, requested_at, principal) "
                         "VALUES ('f', 'never mind', now(), NULL)")
    functions.tick()
    e, f = job(zen, "e"), job(zen, "f")
    assert e.status.value == f.status.value == "CANCELLED"
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    capsys.readouterr()
    main(["jobs", "get", "e"])
    out_e = capsys.readouterr().out
    main(["jobs", "get", "f"])
    out_f = capsys.readouterr().out
    assert "stop_reason: never mind" in out_f and "stop_reason: never mind" in out_e
    assert e.stop_reason == f.stop_reason == "never mind"
