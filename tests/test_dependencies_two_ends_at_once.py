"""Two dependencies that end at once, through the functions against a real Postgres, each final report in a thread of
its own (two function instances): b after a; d after a and x; c after b and x. a fails while x succeeds.

a's end locked the jobs waiting for a (b and d), then, cancelling b, the jobs waiting for b (c); x's end locked the
jobs waiting for x (c, then d). Each held one row the other waited for: a deadlock, and Postgres failed one of the
two reports (the function answered 500; Pub/Sub redelivered it later). Every job a change may move is now locked
in one order, as submitted, before any is moved (``waiting_after``)."""

from __future__ import annotations

import pytest

from tests.crossing import cross
from tests.messages import agent_run, job_request
from tests.test_dependencies import status


@pytest.mark.parametrize("first", ["a", "x"])
def test_two_ends_at_once_move_every_waiting_job_once_and_both_apply(zen_and_fn, db, first):
    zen, fn = zen_and_fn
    for name, after in (("a", None), ("x", None), ("b", ["a"]), ("d", ["a", "x"]), ("c", ["b", "x"])):
        fn.submit(job_request(name, **({"after": after} if after else {})))
    runs = {"a": agent_run("a", vm="vm-a", final="FAILED", exit_code=3), "x": agent_run("x", vm="vm-x")}
    for beat in runs["a"][:-1] + runs["x"][:-1]:
        fn.heartbeat(beat)

    ends = {name: ("on_heartbeat", run[-1], f"{name}-end") for name, run in runs.items()}
    # a's end is about to look at the jobs waiting for b (its cancelled dependent); x's has looked at its own
    failed = cross(zen, fn, db, ends, first, "waiting_after", before=first == "a",
                   at=lambda names, *_: first == "x" or names == ["b"])
    assert failed == []
    assert status(zen, "a", "x", "b", "c", "d") == ["FAILED", "SUCCEEDED", "CANCELLED", "CANCELLED", "CANCELLED"]
    with zen.db.transaction() as session:
        ends_of = {name: [r["reason"] for r in session.run("job_history", job_id=name) if r["to_status"] == "CANCELLED"]
                   for name in "bcd"}
    assert ends_of == {"b": ["dependency a ended FAILED (after_condition ok: it needs every one SUCCEEDED)"],
                       "c": ["dependency b ended CANCELLED (after_condition ok: it needs every one SUCCEEDED)"],
                       "d": ["dependency a ended FAILED (after_condition ok: it needs every one SUCCEEDED)"]}
