"""A VM whose docker daemon stops answering after the agent started (it crashed, /var/lib/docker filled up): every
``docker run`` then exits 125 "Cannot connect to the Docker daemon". That is the VM's fault, not the job's: the
attempt is requeued free (PREEMPTED, docker's line its reason) and the VM takes no more jobs (RETIRED, deleted by
the tick). Each job it claimed ended FAILED, exit code 125, charged to its user, and it went on claiming the next.
An image docker could not pull (exit 125 too) is the job's, and the VM does not report it held."""

from __future__ import annotations

import sys
import textwrap

from tests.agent.fakedocker import FakeDocker
from tests.waiting import wait_for

DAEMON_DOWN = textwrap.dedent("""\
    #!{python}
    import os, sys
    args = sys.argv[1:]
    if args and args[0] == "run":
        sys.stderr.write("docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                         "Is the docker daemon running?\\nSee 'docker run --help'.\\n")
        sys.exit(125)
    os.execv({inner!r}, [{inner!r}, *args])
""")


def test_a_vm_whose_docker_daemon_died_does_not_fail_every_job_charged_to_the_user(scheduler, agents, tmp_path):
    fake = FakeDocker(tmp_path / "docker")
    wrapper = tmp_path / "docker-down"
    wrapper.write_text(DAEMON_DOWN.format(python=sys.executable, inner=fake.path))
    wrapper.chmod(0o755)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=str(wrapper))
    for n in range(3):
        scheduler.submit(f"img-{n}", ["python", "train.py"], image="us-docker.pkg.dev/p/r/train:1")

    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "RETIRED", 60, what="vm-a retired")
    # Its report of the attempt and its VM's retirement are two messages, read in either order.
    wait_for(lambda: any(scheduler.job(f"img-{n}").attempt > 1 for n in range(3)), 30, what="the attempt requeued")
    jobs = [scheduler.job(f"img-{n}") for n in range(3)]
    assert not [j for j in jobs if j.status.value == "FAILED"], [(j.job_id, j.status.value, j.message) for j in jobs]
    ran = [j for j in jobs if j.attempt > 1]  # the one it claimed: requeued free, saying why
    assert len(ran) == 1 and ran[0].status.value == "QUEUED" and ran[0].max_attempts == next(
        j for j in jobs if j.attempt == 1).max_attempts + 1, ran  # (a preemption spends no attempt)
    assert "docker could not start a job's container: docker: Cannot connect to the Docker daemon" in ran[0].message, (
        ran[0].message)


PULL_DENIED = textwrap.dedent("""\
    #!{python}
    import os, sys
    args = sys.argv[1:]
    if args and args[0] in ("run", "pull"):
        sys.stderr.write("Unable to find image 'us-docker.pkg.dev/p/r/trian:1' locally\\n"
                         "docker: Error response from daemon: manifest for us-docker.pkg.dev/p/r/trian:1 not found: "
                         "manifest unknown.\\nSee 'docker run --help'.\\n")
        sys.exit(125)
    os.execv({inner!r}, [{inner!r}, *args])
""")


def test_an_image_docker_could_not_pull_is_not_reported_as_held_by_the_vm(scheduler, agents, tmp_path):
    """The VM heartbeat's ``images`` (the warm cache the planner offers starts by) names only images this VM
    holds: one whose ``docker run`` failed to pull it (exit 125) is not on the VM."""
    fake = FakeDocker(tmp_path / "docker")
    wrapper = tmp_path / "docker-denied"
    wrapper.write_text(PULL_DENIED.format(python=sys.executable, inner=fake.path))
    wrapper.chmod(0o755)
    agents.start("vm-a", ZEN_AGENT_LOCAL="0", ZEN_AGENT_DOCKER=str(wrapper))
    scheduler.submit("typo-1", ["python", "train.py"], image="us-docker.pkg.dev/p/r/trian:1")
    job = scheduler.wait_status("typo-1", "FAILED", timeout_s=60)
    assert job.exit_code == 125 and "manifest unknown" in job.message
    wait_for(lambda: (scheduler.vm("vm-a") or {}).get("state") == "IDLE", 30, what="vm-a idle again")
    scheduler.submit("typo-2", ["python", "train.py"], image="us-docker.pkg.dev/p/r/trian:1")
    scheduler.wait_status("typo-2", "FAILED", timeout_s=60)
    assert "us-docker.pkg.dev/p/r/trian:1" not in (scheduler.vm("vm-a")["images"] or []), (
        scheduler.vm("vm-a")["images"], scheduler.history("typo-2"))
