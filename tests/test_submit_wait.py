"""``zen submit --wait`` follows what it published (``zen.cli.follow``): the job of that request, the refusal
of that message, not just anything carrying the job_id."""

from __future__ import annotations

import io

from tests.messages import agent_run, job_request
from zen.cli.follow import JobStatusSource, follow
from zen.core.models import JobRequest, request_fingerprint


class NoOutput:
    def new_entries(self, job_id, attempt=None):
        return []


def _published(payload: dict) -> str:
    request = JobRequest.model_validate(payload)
    return request_fingerprint(request.canonical(request.job_id))


def _follow(zen, job_id: str, message_id: str, request_hash: str, err: io.StringIO) -> int:
    return follow(job_id, NoOutput(), JobStatusSource(zen.db), out=io.StringIO(), err=err, poll_s=0.01,
                  settle_s=0.0, appear_timeout_s=1.0, give_up_s=2.0, message_id=message_id,
                  request_hash=request_hash)


def test_a_reused_id_is_reported_refused_not_as_the_other_users_job(functions, zen):
    functions.submit(job_request("shared-id", user_id="alice"))
    for beat in agent_run("shared-id", final="SUCCEEDED"):
        functions.heartbeat(beat)
    bobs = job_request("shared-id", user_id="bob", command=["python", "bob.py"])
    functions.submit(bobs, message_id="m-bob")
    err = io.StringIO()
    assert _follow(zen, "shared-id", "m-bob", _published(bobs), err) == 1
    assert "was refused: job_id shared-id is already used by another user's job" in err.getvalue()
    assert "SUCCEEDED" not in err.getvalue()  # alice's job is not shown as bob's


def test_an_earlier_refusal_of_the_same_id_does_not_end_the_fixed_submission(functions, zen):
    functions.submit(job_request("fixme", regions=["mars-north1"]), message_id="m-1")  # refused: bad region
    fixed = job_request("fixme")
    err = io.StringIO()
    # `zen submit --wait` of the fixed file polls before the function has its message: the old
    # refusal is not this message's, so it waits for the job (here: gives up after 2 s, exit 1)
    assert _follow(zen, "fixme", "m-2", _published(fixed), err) == 1
    assert "was refused" not in err.getvalue() and "fixme has not appeared after" in err.getvalue()
    functions.submit(fixed, message_id="m-2")
    for beat in agent_run("fixme", final="SUCCEEDED"):
        functions.heartbeat(beat)
    err = io.StringIO()
    assert _follow(zen, "fixme", "m-2", _published(fixed), err) == 0
    assert "fixme SUCCEEDED" in err.getvalue()


def test_the_same_request_sent_again_follows_the_job_it_duplicates(functions, zen):
    request = job_request("again")
    functions.submit(request, message_id="m-a")
    functions.submit(request, message_id="m-b")  # a duplicate: the same job
    for beat in agent_run("again", final="SUCCEEDED"):
        functions.heartbeat(beat)
    assert _follow(zen, "again", "m-b", _published(request), io.StringIO()) == 0


def test_following_without_a_database_says_so_and_starts_none(no_database, capsys, monkeypatch):
    """A user of a deployed Zen who set only ZEN_PROJECT: following a job started an embedded Postgres
    in ./.zen and failed with a raw database error (relation "jobs" does not exist)."""
    from zen.cli import main as cli

    monkeypatch.setenv("ZEN_JOB_LOGS_DIR", str(no_database / "joblogs"))
    assert cli.main(["logs", "-f", "some-job"]) == 1
    assert "no database to read" in capsys.readouterr().err
    assert not (no_database / ".zen").exists()


class FlakyOutput:
    """A reader whose reads fail for a while (Cloud Logging throttling a project), then work."""

    def __init__(self, failures: int):
        self.failures = failures

    def new_entries(self, job_id, attempt=None):
        from zen.adapters.joblogs import SinkError

        if self.failures:
            self.failures -= 1
            raise SinkError("cannot read Cloud Logging: 429 RESOURCE_EXHAUSTED")
        return []


def test_a_read_that_fails_for_a_moment_does_not_end_the_follow(functions, zen):
    """One throttled read ended `zen submit --wait` with exit 1 while the job ran on: `... && next` saw
    a failed job. Reads are tried again until they have failed for PATIENCE_S."""
    request = job_request("flaky", user_id="alice")
    functions.submit(request, message_id="m-1")
    for beat in agent_run("flaky", final="SUCCEEDED"):
        functions.heartbeat(beat)
    err = io.StringIO()
    code = follow("flaky", FlakyOutput(3), JobStatusSource(zen.db), out=io.StringIO(), err=err, poll_s=0.01,
                  settle_s=0.0, appear_timeout_s=2.0, message_id="m-1", request_hash=_published(request))
    assert code == 0 and "SUCCEEDED" in err.getvalue()


class ThrottledSecondAttempt:
    """Each attempt's read moves its own cursor (as Cloud Logging's reader does); attempt 2's first
    read is throttled."""

    def __init__(self):
        from zen.adapters.joblogs import OutputEntry

        self.pending = {n: [OutputEntry(job_id="retried", attempt=n, stream="stdout", vm="vm-a", seq=1,
                                        time="2026-11-24T00:00:00Z", text=f"from attempt {n}", final=True)]
                        for n in (1, 2)}
        self.throttle = 1

    def new_entries(self, job_id, attempt=None):
        from zen.adapters.joblogs import SinkError

        if attempt == 2 and self.throttle:
            self.throttle -= 1
            raise SinkError("cannot read Cloud Logging: 429")
        entries, self.pending[attempt] = self.pending[attempt], []
        return entries


def test_a_failed_read_of_one_attempt_loses_no_line_of_another(functions, zen):
    """Attempt 1's lines were read (its cursor moved on), attempt 2's read failed, and the retry threw
    the batch away: attempt 1's lines were never printed."""
    request = job_request("retried", user_id="alice")
    functions.submit(request, message_id="m-1")
    for beat in agent_run("retried", final="PREEMPTED") + agent_run("retried", attempt=2, vm="vm-b"):
        functions.heartbeat(beat)
    out = io.StringIO()
    assert follow("retried", ThrottledSecondAttempt(), JobStatusSource(zen.db), out=out, err=io.StringIO(),
                  poll_s=0.01, settle_s=0.0, appear_timeout_s=2.0) == 0
    assert "from attempt 1" in out.getvalue() and "from attempt 2" in out.getvalue()


def test_a_published_job_that_is_late_is_waited_for_without_inviting_a_resubmit(functions, zen):
    """`zen submit --wait` gave up after 60 s with exit 1 (the message published, Pub/Sub still delivering
    it) and hinted at `zen rejected`: a script retrying on failure made a second job. It now says the job
    was published and may still arrive, how to follow it later, and keeps waiting."""
    import threading
    import time

    request = job_request("late", user_id="alice")
    err, result = io.StringIO(), {}

    def wait() -> None:
        result["code"] = follow("late", NoOutput(), JobStatusSource(zen.db), out=io.StringIO(), err=err,
                                poll_s=0.01, settle_s=0.0, appear_timeout_s=0.3, message_id="m-late",
                                request_hash=_published(request))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    deadline = time.monotonic() + 10
    while "was published" not in err.getvalue() and waiter.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # well past the appear timeout: still waiting
    assert waiter.is_alive(), err.getvalue()
    note = err.getvalue()
    assert "job late was published (message m-late)" in note and "may still arrive" in note
    assert "zen logs -f late" in note and "zen jobs get late" in note and "zen rejected" not in note
    functions.submit(request, message_id="m-late")  # Pub/Sub delivered it at last
    for beat in agent_run("late", final="SUCCEEDED"):
        functions.heartbeat(beat)
    waiter.join(timeout=30)
    assert result.get("code") == 0 and "late SUCCEEDED" in err.getvalue()


def test_zen_logs_reads_a_stopped_local_stacks_output(no_database, monkeypatch, capsys):
    """After `zen local up` has stopped, the jobs' output is still on disk: zen logs reads it there
    rather than asking for Google credentials."""
    from zen.adapters.joblogs import OutputEntry
    from zen.cli.main import main

    monkeypatch.delenv("ZEN_JOB_LOGS_DIR", raising=False)
    attempt = no_database / ".zen" / "joblogs" / "job-1" / "attempt-1.jsonl"
    attempt.parent.mkdir(parents=True)
    entries = [OutputEntry("job-1", 1, "stdout", "vm-1", 1, "2026-11-29T10:00:00Z", "hello from a past run"),
               OutputEntry("job-1", 1, "stdout", "vm-1", 2, "2026-11-29T10:00:01Z", "", final=True)]
    attempt.write_text("".join(e.to_json() + "\n" for e in entries))
    assert main(["logs", "job-1"]) == 0
    assert "hello from a past run" in capsys.readouterr().out


class LastLines:
    """The job's last lines, read in the same poll that first finds the job ended."""

    def __init__(self):
        from zen.adapters.joblogs import OutputEntry

        self.entries = [OutputEntry(job_id="tail", attempt=1, stream="stdout", vm="vm-a", seq=n,
                                    time="2026-11-24T00:00:00Z", text=f"step {n}", final=n == 2) for n in (1, 2)]

    def new_entries(self, job_id, attempt=None):
        entries, self.entries = self.entries, []
        return entries


def test_the_end_is_told_after_the_lines_read_with_it(functions, zen):
    request = job_request("tail", user_id="alice")
    functions.submit(request, message_id="m-1")
    for beat in agent_run("tail", final="SUCCEEDED"):
        functions.heartbeat(beat)
    both = io.StringIO()  # stdout and stderr on one terminal
    code = follow("tail", LastLines(), JobStatusSource(zen.db), out=both, err=both, poll_s=0.01, settle_s=0.0,
                  appear_timeout_s=2.0, message_id="m-1", request_hash=_published(request))
    text = both.getvalue()
    assert code == 0 and text.index("step 2") < text.index("SUCCEEDED"), text


def test_reads_that_start_failing_are_told_at_once_then_given_up(functions, zen):
    """A follow whose reads start failing (the local stack stopped, the database unreachable) says so at once,
    not only when it gives up 120 s later: it printed nothing meanwhile."""
    from zen.cli import follow as follow_module
    from zen.core.errors import TransientError

    functions.submit(job_request("quiet"))
    status, reads, now = JobStatusSource(zen.db), [], [0.0]

    class Failing:
        def job(self, job_id):
            reads.append(now[0])
            if len(reads) > 1:
                raise TransientError("cannot connect to Postgres: communication error")
            return status.job(job_id)

        def rejection(self, job_id, message_id=None):
            return None

    def clock() -> float:
        now[0] += 20.0
        return now[0]

    err = io.StringIO()
    try:
        follow("quiet", NoOutput(), Failing(), out=io.StringIO(), err=err, poll_s=0.0, clock=clock)
    except TransientError as exc:
        given_up = str(exc)
    lines = err.getvalue().splitlines()
    told = [i for i, line in enumerate(lines) if line.startswith("zen: cannot read job quiet now")]
    assert len(told) == 1 and "lost track of job quiet" in given_up, (lines, given_up)
    assert reads[-1] - reads[1] >= follow_module.PATIENCE_S - 40.0
