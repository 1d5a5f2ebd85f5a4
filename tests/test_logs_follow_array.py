"""`zen logs -f ARRAY` (the id `zen submit --array` prints) says at once where its tasks' output is, as `zen logs
ARRAY` does: it waited a minute in silence for a job of that id, then said "no job ARRAY after 60 s (`zen
rejected` lists refused ones)" of an array that exists, nothing refused."""

from __future__ import annotations

import time

from tests.messages import job_request
from tests.test_usercli_frictions import LOOPBACK_METADATA, zen_cli  # noqa: F401  (fixture)
from tests.token_support import issuer  # noqa: F401  (fixture)


def test_following_an_arrays_id_says_it_is_an_array_at_once(zen_and_fn, zen_cli, tmp_path):
    zen, fn = zen_and_fn
    fn.submit(job_request("sweep", array={"count": 2, "max_parallel": 1}))
    logs = {"ZEN_JOB_LOGS_DIR": str(tmp_path / "joblogs")}
    (tmp_path / "joblogs").mkdir()
    plain = zen_cli("logs", "sweep", **logs)
    assert "sweep is an array: each task's output is under its own id" in plain.stderr, plain.stderr
    started = time.monotonic()
    followed = zen_cli("logs", "-f", "sweep", **logs)
    assert time.monotonic() - started < 30
    assert followed.returncode == 1 and "sweep is an array: each task's output" in followed.stderr, followed.stderr
