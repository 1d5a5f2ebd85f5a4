"""``docker run`` pulls the job's image from Artifact Registry with credentials its helper gives
(``docker-credential-gcloud``: ``startup.sh`` runs ``gcloud auth configure-docker``), which asks the metadata server
for the VM's token. When the helper fails (the token could not be refreshed, gcloud broken on the VM) the docker
CLI prints ``docker: error getting credentials - err: exit status 1, out: ...`` and exits 125 before the pull
(docker/for-win#14906 shows the line). The VM's credentials failed, not the job: the attempt was FAILED, exit code
125, and a job of ``max_attempts`` 1 was over for a token refresh that failed once. Now it is the VM's, as a pull cut
short is (``zen.agent.container.PULL_CUT``): the attempt requeued free, docker's line its reason (in its history
too: ``zen.core.gave_back``), the VM retired."""

from __future__ import annotations

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_container_ends_named import IMAGE
from tests.waiting import wait_for

# The newer docker CLI's words after its error (the older one's: "See 'docker run --help'.")
RUN_HELP = "\nRun 'docker run --help' for more information\n"
NO_TOKEN = ("Unable to find image 'us-docker.pkg.dev/p/r/train:1' locally\n"
            "docker: error getting credentials - err: exit status 1, out: ``" + RUN_HELP)


def test_a_credential_helper_that_failed_does_not_fail_a_job_of_one_attempt(scheduler, agents, tmp_path):
    docker = FakeDocker(tmp_path / "docker")
    docker.ends(125, NO_TOKEN, started=False)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=docker.path)
    scheduler.submit("train-1", ["python", "train.py"], image=IMAGE, max_attempts=1)

    job = wait_for(lambda: (job := scheduler.job("train-1")) and (job.attempt == 2 or job.status.value == "FAILED")
                   and job, 60, what="train-1 ended or requeued")
    assert (job.status.value, job.attempt, job.exit_code) == ("QUEUED", 2, None), (job.status.value, job.message,
                                                                                   scheduler.history("train-1"))
    assert "docker could not start a job's container: docker: error getting credentials" in (job.message or ""), (
        job.message)
    [lost] = [reason for attempt, status, reason in scheduler.history("train-1") if status == "LOST"]  # zen explain
    assert lost.startswith("VM vm-a gave the attempt back (docker could not start a job's container: docker: error "
                           "getting credentials") and lost.endswith("(no attempt spent)"), lost
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 60, what="vm-a retired")
