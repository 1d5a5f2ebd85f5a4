"""An array whose id is another array's task 0 (array b's task b-0, array b-0), submitted at the same moment, is
accepted once. jobs_one_namespace files task 0 under its array's id ("b"), so task b-0 holds no "b-0" for array
b-0's task 0 to meet, and each transaction's reads missed the other's uncommitted rows: both were accepted, and a
stop of array b-0 (bob's) cancelled alice's task b-0 while his own tasks ran on."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.test_arrays import jobs, refusals, statuses, submitted_meanwhile


@pytest.mark.parametrize("first, meanwhile, task", [
    (("b", {"count": 2}), ("b-0", {"count": 2}), "b-0"),      # array b-0 while b's transaction holds task b-0
    (("b-0", {"count": 2}), ("b", {"count": 2}), "b-0-0"),    # array b while b-0's transaction holds task b-0-0
])
def test_an_array_named_as_another_arrays_task_0_submitted_at_once_is_accepted_once(zen_and_fn, first, meanwhile, task):
    zen, fn = zen_and_fn
    array_id, array = first
    racing = submitted_meanwhile(zen, fn, task, job_request(meanwhile[0], user_id="bob", array=meanwhile[1]))
    fn.submit(job_request(array_id, array=array))
    zen.store.hooks.clear()
    racing[0].join(timeout=30)
    assert statuses(zen, array_id, 2) == ["QUEUED", "QUEUED"]
    other = meanwhile[0]
    assert jobs(zen, f"{other}-0") == [None], "both arrays were accepted: b-0 is a task of b and array b-0's id"
    assert refusals(zen), "the second array was not refused"
