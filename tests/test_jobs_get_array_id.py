"""``zen submit --array 4 --job-id sweep`` prints the array's id, and ``zen explain sweep``, ``zen stop sweep``,
``zen jobs list --array sweep`` and ``zen logs sweep`` all know it as an array (``zen logs`` says where the tasks'
output is). ``zen jobs get sweep`` and ``zen jobs history sweep`` said ``zen: no job sweep (`zen jobs list` lists
them)`` (exit 1): a newcomer read that the sweep just submitted did not exist. ``kit.no_job`` says it is an array
and where its tasks are."""

from __future__ import annotations

from tests.messages import job_request
from tests.test_usercli_frictions import LOOPBACK_METADATA, zen_cli  # noqa: F401  (fixture)
from tests.token_support import issuer  # noqa: F401  (fixture)


def test_jobs_get_and_history_of_an_arrays_id_say_it_is_an_array(zen_and_fn, zen_cli):
    zen, fn = zen_and_fn
    fn.submit(job_request("sweep", array={"count": 2, "max_parallel": 1}))
    for command in (("jobs", "get", "sweep"), ("jobs", "history", "sweep")):
        said = zen_cli(*command)
        assert "no job sweep" not in said.stderr, (command, said.stderr)
        assert "array" in said.stderr + said.stdout, (command, said.stderr)
