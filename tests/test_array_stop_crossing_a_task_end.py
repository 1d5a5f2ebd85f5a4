"""A stop of an array that crosses the end of one of its tasks while a job waits for the array (``after``),
through the functions under functions-framework against a real Postgres, each delivery in a thread of its own
(two function instances).

The stop cancels a task not yet on a VM (QUEUED) at once, and that end locks the jobs waiting for the array; a
later task's final report holds its task and then waits for those same rows, and the stop waited for the reported
task: a deadlock. Postgres failed one of the two, which the function answered 500 (redelivered later): the report
when the stop was there first, the stop when the report was. The stop now locks every task not ended before it
stops any."""

from __future__ import annotations

import threading

import pytest

from tests.crossing import deliver, until_one_waits_for_a_lock
from tests.messages import agent_run, job_request
from tests.test_dependencies import status


@pytest.mark.parametrize("first", ["the stop", "the report"])
def test_a_task_ending_while_its_array_is_stopped_is_applied_and_so_is_the_stop(zen_and_fn, db, first):
    zen, fn = zen_and_fn
    fn.submit(job_request("sweep", array={"count": 3, "max_parallel": 2}))  # sweep-0, sweep-1 let go; sweep-2 held
    fn.submit(job_request("pick", after=["sweep"], after_condition="any"))
    beats = agent_run("sweep-1", vm="vm-b")
    for beat in beats[:-1]:
        fn.heartbeat(beat)
    assert status(zen, "sweep-0", "sweep-1", "sweep-2", "pick") == ["QUEUED", "RUNNING", "PENDING", "PENDING"]

    failed: list[str] = []
    stop = threading.Thread(target=deliver, args=(fn, "on_stop_requested", {"job_id": "sweep"}, "stop", failed))
    report = threading.Thread(target=deliver, args=(fn, "on_heartbeat", beats[-1], "report", failed))
    reached, go = threading.Event(), threading.Event()

    def at_the_waiting_jobs(*_):  # a look at the jobs waiting for the array (their rows locked by it)
        if threading.current_thread() is stop and first == "the stop" and not report.ident:
            report.start()  # the report runs until it waits for a row the stop holds
            until_one_waits_for_a_lock(db, report)
        if threading.current_thread() is report and first == "the report" and not reached.is_set():
            reached.set()  # the report holds sweep-1 (and the task its end lets go), not yet the waiting jobs
            go.wait(timeout=10)

    if first == "the stop":
        zen.store.hooks.after("waiting_after", at_the_waiting_jobs)
        stop.start()
    else:
        zen.store.hooks.before("waiting_after", at_the_waiting_jobs)
        report.start()
        assert reached.wait(timeout=10)
        stop.start()
        until_one_waits_for_a_lock(db, stop)  # the stop waits for sweep-1
        go.set()
    stop.join(timeout=30)  # (the stop starts the report first, when it goes first)
    if report.ident is not None:
        report.join(timeout=30)
    zen.store.hooks.clear()

    assert report.ident is not None and not stop.is_alive() and not report.is_alive()
    assert failed == []
    # sweep-1 ended before the stop reached its VM; the others were cancelled; pick (after any) goes once all ended.
    assert status(zen, "sweep-0", "sweep-1", "sweep-2", "pick") == ["CANCELLED", "SUCCEEDED", "CANCELLED", "QUEUED"]
