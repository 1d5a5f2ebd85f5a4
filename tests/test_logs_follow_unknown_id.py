"""`zen logs -f ID` of an id no job has (a mistyped one, or the README's sample id typed as written) printed nothing
for a minute, then "no job ID after 60 s": the user could not tell a wait for a job about to appear from a hang.
It now says, once and soon, that no job has that id yet, how long it waits, and where to check the id."""

from __future__ import annotations

import io

from tests.messages import agent_run, job_request
from zen.cli.follow import JobStatusSource, follow


class NoOutput:
    def new_entries(self, job_id, attempt=None):
        return []


class Ticking:
    """Half a second more at each reading: the minute's wait passes in a few hundred polls."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.5
        return self.now


def test_following_an_unknown_id_says_it_waits_before_the_minute_is_over(zen):
    err = io.StringIO()
    code = follow("nosuch-1", NoOutput(), JobStatusSource(zen.db), out=io.StringIO(), err=err, poll_s=0.0,
                  settle_s=0.0, clock=Ticking())
    lines = err.getvalue().splitlines()
    assert code == 1 and lines[-1].startswith("zen: no job nosuch-1 after 60 s"), lines
    assert len(lines) == 2 and "waiting up to 60 s" in lines[0] and "zen jobs list" in lines[0], lines


def test_a_job_that_is_there_is_followed_without_the_note(functions, zen):
    functions.submit(job_request("quick-1"))
    for beat in agent_run("quick-1", final="SUCCEEDED"):
        functions.heartbeat(beat)
    err = io.StringIO()
    code = follow("quick-1", NoOutput(), JobStatusSource(zen.db), out=io.StringIO(), err=err, poll_s=0.0,
                  settle_s=0.0, clock=Ticking())
    assert code == 0 and "quick-1 SUCCEEDED" in err.getvalue() and "waiting up to" not in err.getvalue(), err.getvalue()
