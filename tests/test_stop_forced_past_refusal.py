"""`ZEN_AS=bob zen stop --force` of alice's queued job printed "job ... is QUEUED: it is cancelled before it runs"
and exited 0, while Zen refused the stop (bob may not stop it), which only `zen rejected` told. Forced past a
refusal the CLI knows of, it says the stop is sent and that Zen refuses it, not what would happen to the job."""

from __future__ import annotations

import json
import time

from tests.messages import job_request
from tests.test_usercli_frictions import zen_cli  # noqa: F401  (fixture)
from tests.token_support import issuer  # noqa: F401  (fixture)


def test_a_forced_stop_zen_refuses_does_not_promise_the_jobs_end(zen_cli, publisher, functions, issuer):  # noqa: F811
    from zen.core.config import GCLOUD_CLIENT_IDS

    functions.submit(job_request("job-f"))  # alice's, QUEUED
    token = issuer.user_token(email="bob@lab.example", audience=GCLOUD_CLIENT_IDS[0], now=time.time())
    forced = zen_cli("stop", "--force", "job-f", ZEN_ID_TOKEN=token)
    assert forced.returncode == 0 and [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-stop")] == ["job-f"]
    assert "cancelled before it runs" not in forced.stdout, forced.stdout
    assert "Zen refuses it unless it runs with ZEN_AUTH=off: bob@lab.example may not stop job job-f" in forced.stdout
