"""Secret Manager answering UNAUTHENTICATED (401: the VM's access token was refused, e.g. a metadata server
hiccup handing out a stale token) is the VM's fault, as Cloud Storage's 401 is for staging
(zen.agent.staging._not_the_jobs: Unavailable, PREEMPTED): tried again, the job runs; it was FAILED for good."""

from __future__ import annotations

import grpc

from tests.agent.helpers import job_command
from tests.agent.test_secrets import HF, config, secret_manager  # noqa: F401 (fixtures)


def test_a_refused_token_once_does_not_fail_the_users_job(scheduler, agents, secret_manager, tmp_path):
    agents.start("vm-a", ZEN_SECRETS_ENDPOINT=secret_manager.endpoint)
    secret_manager.store.fail_next(grpc.StatusCode.UNAUTHENTICATED, 1)
    scheduler.submit("sec-401", job_command("--print-env", "HF_TOKEN", "--print", "done"), secrets={"HF_TOKEN": HF})

    job = scheduler.wait_status("sec-401", "SUCCEEDED", "FAILED", timeout_s=60)

    assert job.status.value == "SUCCEEDED", (job.status.value, job.exit_code, job.message, scheduler.history("sec-401"))
