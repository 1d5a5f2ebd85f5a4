"""A container's secrets are passed by name (``docker run -e NAME``): their values sit in the environment of
the agent's launcher and of the docker CLI, so a secret may not be named as a variable those programs read
(``zen.core.secrets.reserved_secret``: LD_*, PYTHON*, DOCKER_*, PATH, HOME; the agent refuses such a start,
``zen.agent.runner.plan_launch``). The docker CLI starts one more program in that environment: the registry's
credential helper, ``docker-credential-gcloud`` on a Zen VM (``startup.sh`` runs ``gcloud auth
configure-docker`` as the agent's user), whenever ``docker run`` pulls an image from Artifact Registry. That
helper is gcloud's shell wrapper, which runs ``exec "$CLOUDSDK_PYTHON" $CLOUDSDK_PYTHON_ARGS .../gcloud.py``:
a job whose secrets are named CLOUDSDK_PYTHON and CLOUDSDK_PYTHON_ARGS runs a program of its choosing on
the VM, outside its container, as the agent's user (docker group: root's equal) with the VM's credentials.

The docker CLI here is a stand-in that does what the real one does for a registry with a credential helper
(runs ``docker-credential-<helper> get`` with the registry on stdin, in its own environment); the helper is
the real ``docker-credential-gcloud`` of the Google Cloud CLI installed on this machine."""

from __future__ import annotations

import shutil
import stat
import sys

import pytest

from zen.agent.runner import CannotRun, JobSpec, RunningJob

HELPER = shutil.which("docker-credential-gcloud")


@pytest.mark.skipif(HELPER is None, reason="needs the Google Cloud CLI's docker-credential-gcloud")
def test_a_job_secret_cannot_choose_what_the_docker_credential_helper_runs_on_the_vm(tmp_path):
    docker = tmp_path / "docker"
    docker.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys\n"
        "if sys.argv[1] == 'run':  # the image is not here: the CLI asks the registry's helper for credentials\n"
        f"    subprocess.run([{HELPER!r}, 'get'], input=b'us-docker.pkg.dev', capture_output=True, timeout=60)\n")
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    marker = tmp_path / "ran-on-the-vm"
    spec = JobSpec(job_id="j", attempt=1, image="us-docker.pkg.dev/p/r/img:1", command=["true"],
                   secret_env={"CLOUDSDK_PYTHON": "/bin/sh", "CLOUDSDK_PYTHON_ARGS": f"-c touch${{IFS}}{marker}"})

    try:
        job = RunningJob.start(spec, local=False, docker=str(docker))
    except CannotRun:
        return  # refused, as a secret named PYTHONPATH or LD_PRELOAD is
    job.outcome()

    assert not marker.exists(), "the job's secrets ran a program on the VM, outside its container, as the agent"
