"""An array id reused for an array of another size (or command) is refused as the array's ("job_id sw is already an
array's of other tasks"), whether or not its task 0's request changed; it read "job_id sw-0 (task 0 of array sw)
is already used by another job", while no other job has it: the user's own array does."""

from __future__ import annotations

import pytest

from tests.messages import job_request
from tests.test_arrays import refusals, statuses


@pytest.mark.parametrize("second", [{"array": {"count": 5}}, {"array": {"count": 3}, "command": ["python", "b.py"]}])
def test_an_arrays_id_reused_for_an_array_of_another_size_is_refused_as_an_arrays(zen_and_fn, second):
    zen, fn = zen_and_fn
    fn.submit(job_request("sw", array={"count": 3}))
    fn.submit(job_request("sw", **second))
    assert statuses(zen, "sw", 5) == ["QUEUED", "QUEUED", "QUEUED", "-", "-"]
    assert "job_id sw is already an array's" in refusals(zen)[-1], refusals(zen)[-1]
