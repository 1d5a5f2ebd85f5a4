"""Dependencies (zen.core.dependencies) through the functions against a real Postgres: a pipeline whose steps
wait PENDING with the reason, start when what they wait for ends as needed, and are cancelled with the
reason when it cannot; afterany; arrays as dependencies; refusals at submission; the tick behind it."""

from __future__ import annotations

import pytest

from tests.messages import agent_run, job_request
from tests.test_functions_lifecycle import job


def status(zen, *job_ids):
    return [job(zen, j).status.value if job(zen, j) else None for j in job_ids]


def run(fn, job_id, final="SUCCEEDED", vm="vm-a", attempt=1):
    for beat in agent_run(job_id, vm=vm, attempt=attempt, final=final, exit_code=0 if final == "SUCCEEDED" else 2):
        fn.heartbeat(beat)


def last_rejection(zen) -> str:
    with zen.db.transaction() as session:
        return session.sql("SELECT reason FROM rejected_messages ORDER BY id DESC LIMIT 1")[0]["reason"]


def test_a_pipeline_waits_starts_and_is_cancelled_when_a_step_fails(zen_and_fn):
    zen, fn = zen_and_fn
    fn.submit(job_request("prep"))
    fn.submit(job_request("train", after=["prep"]))
    fn.submit(job_request("eval", after=["train"]))
    assert status(zen, "prep", "train", "eval") == ["QUEUED", "PENDING", "PENDING"]
    assert job(zen, "train").hold == "after: waiting for prep"
    run(fn, "prep")
    assert status(zen, "train", "eval") == ["QUEUED", "PENDING"]
    run(fn, "train", final="FAILED")
    assert status(zen, "eval") == ["CANCELLED"]
    with zen.db.transaction() as session:
        reasons = [r["reason"] for r in session.run("job_history", job_id="eval")]
    assert "dependency train ended FAILED (after_condition ok: it needs every one SUCCEEDED)" in reasons


def test_afterany_starts_after_a_failure_and_a_retry_is_waited_for(zen_and_fn, clock):
    zen, fn = zen_and_fn
    fn.submit(job_request("flaky", max_retries=1, retry_backoff_s=0))
    fn.submit(job_request("report", after=["flaky"], after_condition="any"))
    fn.submit(job_request("next", after=["flaky"]))
    run(fn, "flaky", final="FAILED")  # retried: not ended, so both still wait
    assert status(zen, "flaky", "report", "next") == ["PENDING", "PENDING", "PENDING"]
    fn.tick()
    run(fn, "flaky", attempt=2, vm="vm-b")
    assert status(zen, "flaky", "report", "next") == ["SUCCEEDED", "QUEUED", "QUEUED"]


def test_an_array_is_waited_for_as_a_whole(zen_and_fn):
    zen, fn = zen_and_fn
    fn.submit(job_request("sweep", array={"count": 2}))
    fn.submit(job_request("pick", after=["sweep"]))
    run(fn, "sweep-0")
    assert status(zen, "pick") == ["PENDING"]
    run(fn, "sweep-1", vm="vm-b")
    assert status(zen, "pick") == ["QUEUED"]


def test_the_tick_looks_again_at_what_a_change_did_not_wake(zen_and_fn):
    zen, fn = zen_and_fn
    fn.submit(job_request("a"))
    fn.submit(job_request("b", after=["a"]))
    with zen.db.transaction() as session:  # a's end, as if it committed while b was being submitted
        session.sql("UPDATE jobs SET status = 'SUCCEEDED' WHERE job_id = 'a'")
    assert status(zen, "b") == ["PENDING"]
    fn.tick()
    assert status(zen, "b") == ["QUEUED"]


def test_the_ticks_look_is_not_taken_up_by_jobs_surely_still_waiting(zen_and_fn, clock):
    """The tick looks at 200 jobs held by dependencies at most; it read the oldest, and 200 tasks waiting for a
    long job kept it from ever seeing a newer job whose dependency had ended: it waited for ever. It reads
    only those that may move (all their dependencies ended, or, with after_condition ok, one ended otherwise
    than SUCCEEDED), on both stores alike (held_after)."""
    from zen.store.jobstore import PostgresJobTx

    zen, fn = zen_and_fn
    fn.submit(job_request("long"))
    fn.submit(job_request("sweep", after=["long"], array={"count": 200}))
    clock.advance(5)
    for name, after in (("a", None), ("bad", None), ("b", ["a"]), ("c", ["bad", "long"])):
        fn.submit(job_request(name, **({"after": after} if after else {})))
    fn.submit(job_request("any-of", after=["bad", "long"], after_condition="any"))
    with zen.db.transaction() as session:  # their ends, as if committed while b, c and any-of were submitted
        session.sql("UPDATE jobs SET status = 'SUCCEEDED' WHERE job_id = 'a'")
        session.sql("UPDATE jobs SET status = 'FAILED' WHERE job_id = 'bad'")
    with zen.db.transaction() as session:
        assert sorted(PostgresJobTx(session).held_after(200)) == ["b", "c"]
    fn.tick()
    assert status(zen, "b", "c", "any-of", "sweep-0") == ["QUEUED", "CANCELLED", "PENDING", "PENDING"]


def test_an_arrays_end_is_counted_not_read_task_by_task(zen_and_fn):
    """A job waiting for arrays is looked at again at each task's end, and it read every task of every array
    it names (100 arrays of 1,000 tasks and 6 such jobs: one final heartbeat took 72.5 s, past the function's
    60 s timeout; 10 arrays and 3 jobs: 5.0-5.3 s, now 0.05-0.07 s). Each array is counted in Postgres
    (array_end); the outcomes are as before."""
    zen, fn = zen_and_fn
    fn.submit(job_request("sweep", array={"count": 2}))
    fn.submit(job_request("pick", after=["sweep"]))
    fn.submit(job_request("either", after=["sweep"], after_condition="any"))
    read: list[str] = []
    zen.store.hooks.before("array_tasks", lambda array_id: read.append(array_id))
    run(fn, "sweep-0")
    assert status(zen, "pick", "either") == ["PENDING", "PENDING"]
    run(fn, "sweep-1", final="FAILED", vm="vm-b")
    assert status(zen, "pick", "either") == ["CANCELLED", "QUEUED"]
    assert read == []


@pytest.mark.parametrize("request_fields, reason", [
    ({"after": ["nope"]}, "after: no job or array nope is known"),
    ({"after": ["dep-self"], "job_id": "dep-self"}, "after: job dep-self cannot wait for itself"),
    ({"after": ["done-bad"]}, "after: dependency done-bad ended FAILED (after_condition ok: it needs every one "
                              "SUCCEEDED): this job could never start"),
    ({"after": ["bobs"]}, "after: bobs: alice may not wait for job bobs, which is bob's"),
    ({"after_condition": "any"}, "after_condition needs after"),
])
def test_bad_dependencies_are_refused_at_submission(zen_and_fn, request_fields, reason):
    zen, fn = zen_and_fn
    fn.submit(job_request("done-bad"))
    run(fn, "done-bad", final="FAILED")
    fn.submit(job_request("bobs", user_id="bob"))
    fields = {"job_id": "dep-new", **request_fields}
    fn.submit(job_request(fields.pop("job_id"), **fields))
    assert reason in last_rejection(zen)


def test_a_redelivered_submit_of_a_cancelled_dependent_is_a_duplicate_not_a_refusal(zen_and_fn):
    zen, fn = zen_and_fn
    fn.submit(job_request("first"))
    fn.submit(job_request("second", after=["first"]), message_id="m-second")
    run(fn, "first", final="FAILED")
    assert status(zen, "second") == ["CANCELLED"]
    fn.submit(job_request("second", after=["first"]), message_id="m-second")  # Pub/Sub delivers it again
    with zen.db.transaction() as session:
        refused = session.sql("SELECT count(*) AS n FROM rejected_messages WHERE job_id = 'second'")[0]["n"]
    assert refused == 0


@pytest.mark.parametrize("how", ["its end", "a stop"])
def test_a_diamond_of_dependencies_moves_whole_when_its_root_ends(zen_and_fn, how):
    """b after a; c after a and b. a's end cancels b, whose end cancels c before a's own look at c: that look
    wrote over c's cancel (a concurrent change) and a's final report failed at every delivery, until the
    sweep took the attempt for lost and ran a again; a's stop likewise never applied."""
    zen, fn = zen_and_fn
    fn.submit(job_request("a"))
    fn.submit(job_request("b", after=["a"]))
    fn.submit(job_request("c", after=["a", "b"]))
    if how == "a stop":
        fn.stop({"job_id": "a"})
        assert status(zen, "a", "b", "c") == ["CANCELLED", "CANCELLED", "CANCELLED"]
        return
    run(fn, "a", final="FAILED")
    assert status(zen, "a", "b", "c") == ["FAILED", "CANCELLED", "CANCELLED"]
    assert job(zen, "a").attempt == 1


def test_a_diamond_with_afterany_starts_its_last_step_once(zen_and_fn):
    """c after a and b, whatever their ends: a's failure cancels b, whose end lets c go; a's own look at c
    let it go again, over that (a concurrent change: a's final report failed at every delivery)."""
    zen, fn = zen_and_fn
    fn.submit(job_request("a"))
    fn.submit(job_request("b", after=["a"]))
    fn.submit(job_request("c", after=["a", "b"], after_condition="any"))
    run(fn, "a", final="FAILED")
    assert status(zen, "a", "b", "c") == ["FAILED", "CANCELLED", "QUEUED"]
    with zen.db.transaction() as session:
        starts = [r for r in session.run("job_history", job_id="c") if r["to_status"] == "QUEUED"]
    assert len(starts) == 1


def test_zen_submit_refuses_a_job_whose_dependency_ended_so_it_could_never_start(zen_and_fn, db_url, monkeypatch,
                                                                                  capsys):
    """It read the dependency (to wait for it to be stored) but not its end: "submitted eval", exit 0, and the
    function refused the job. afterany still goes."""
    from zen.cli.main import main

    zen, fn = zen_and_fn
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    fn.submit(job_request("prep"))
    for beat in agent_run("prep", final="FAILED", exit_code=3):
        fn.heartbeat(beat)
    fn.submit(job_request("sweep", array={"count": 2}))
    for n in range(2):
        for beat in agent_run(f"sweep-{n}", vm=f"vm-{n}", final="FAILED" if n else "SUCCEEDED", exit_code=n):
            fn.heartbeat(beat)
    for dep in ("prep", "sweep"):
        assert main(["submit", "--user", "alice", "--after", dep, "--cluster", "4xa100-40gb", "--", "true"]) == 1
        assert f"--after: dependency {dep} ended FAILED (after_condition ok" in capsys.readouterr().err
    main(["submit", "--user", "alice", "--after", "prep", "--after-any", "--cluster", "4xa100-40gb", "--", "true"])
    assert "could never start" not in capsys.readouterr().err
