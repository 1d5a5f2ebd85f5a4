"""`zen explain` (and the console's job line) of an ended job gives the change that ended it; it gave the job's last
history row whatever it was. A stop that crossed the job's submission is kept and looked at by the tick; sent by
someone who may not stop the job, the tick notes on the job that it is not applied, and where the job had ended
meanwhile (its owner stopped it), that note was given as the reason the job ended: "ended: a stop sent before the
job came is not applied: mallory@example.com may not stop job f ...", for a job its owner cancelled."""

from __future__ import annotations

from tests.messages import job_request
from tests.test_explain_stopping import why
from zen.store import repository


def test_an_ended_jobs_line_is_its_ending_not_a_later_note(functions, zen):
    functions.submit(job_request("f", user_id="alice"))
    with zen.db.transaction() as session:  # mallory's stop crossed the submission: kept, looked at by the tick
        session.sql("INSERT INTO early_stops (job_id, reason, requested_at, principal) "
                    "VALUES ('f', 'mine now', now(), 'mallory@example.com')")
    functions.stop({"job_id": "f", "reason": "wrong data"})  # its owner's stop ends it first
    zen.jobs.sweeps.apply_early_stops()  # what the tick does with it
    with zen.db.transaction() as session:
        history = repository.job_history(session, "f")
    assert "is not applied" in history[-1]["reason"] and history[-1]["to_status"] == "CANCELLED"  # the note, last
    line = why(zen, "f")
    assert line.startswith("ended: wrong data"), line


def test_a_job_that_ended_before_it_ran_points_to_no_output(functions, zen):
    """A job cancelled while QUEUED (or by its dependency's end) never ran: its line sent the user to
    `zen logs`, which answers that there is no output and points back to `zen explain`."""
    functions.submit(job_request("never"))
    functions.stop({"job_id": "never", "reason": "wrong data"})
    line = why(zen, "never")
    assert line.startswith("ended: wrong data"), line
    assert "zen logs" not in line and line.endswith("it never ran: no output"), line
