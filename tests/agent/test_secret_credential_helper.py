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
import subprocess
import sys

import pytest

from zen.agent.runner import CannotRun, JobSpec, RunningJob

HELPER = shutil.which("docker-credential-gcloud")


CC = shutil.which("cc") or shutil.which("gcc")


def pulling_docker(tmp_path):
    """A docker CLI stand-in that, for ``run``, does what the real one does to pull from a registry with a
    credential helper: ``docker-credential-<helper> get`` with the registry on stdin, in its own environment."""
    docker = tmp_path / "docker"
    docker.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys\n"
        "if sys.argv[1] == 'run':  # the image is not here: the CLI asks the registry's helper for credentials\n"
        f"    subprocess.run([{HELPER!r}, 'get'], input=b'us-docker.pkg.dev', capture_output=True, timeout=60)\n")
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    return docker


def ran_on_the_vm(tmp_path, secrets: dict[str, str]) -> None:
    """Start a container job with ``secrets`` through the stand-in: refused (``CannotRun``), or run to its end."""
    spec = JobSpec(job_id="j", attempt=1, image="us-docker.pkg.dev/p/r/img:1", command=["true"], secret_env=secrets)
    try:
        job = RunningJob.start(spec, local=False, docker=str(pulling_docker(tmp_path)))
    except CannotRun:
        return  # refused, as a secret named PYTHONPATH or LD_PRELOAD is
    job.outcome()


@pytest.mark.skipif(HELPER is None, reason="needs the Google Cloud CLI's docker-credential-gcloud")
def test_a_job_secret_cannot_choose_what_the_docker_credential_helper_runs_on_the_vm(tmp_path):
    marker = tmp_path / "ran-on-the-vm"
    ran_on_the_vm(tmp_path, {"CLOUDSDK_PYTHON": "/bin/sh", "CLOUDSDK_PYTHON_ARGS": f"-c touch${{IFS}}{marker}"})
    assert not marker.exists(), "the job's secrets ran a program on the VM, outside its container, as the agent"


@pytest.mark.skipif(HELPER is None or CC is None, reason="needs docker-credential-gcloud and a C compiler")
def test_a_job_secret_cannot_load_a_library_into_the_docker_credential_helper(tmp_path):
    """``OPENSSL_CONF``: the helper's Python loads the OpenSSL configuration it names, whose ``providers`` section
    loads any shared object; one among the job's staged inputs (at a path fixed by its id and attempt) ran."""
    marker = tmp_path / "ran-on-the-vm"
    source = tmp_path / "evil.c"  # what the job would stage as an input
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void ran(void) '
                      f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    library = tmp_path / "evil.so"
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    conf = tmp_path / "openssl.cnf"
    conf.write_text("openssl_conf = init\n[init]\nproviders = prov\n[prov]\nevil = evil\ndefault = default\n"
                    f"[evil]\nmodule = {library}\nactivate = 1\n[default]\nactivate = 1\n")
    ran_on_the_vm(tmp_path, {"OPENSSL_CONF": str(conf)})
    assert not marker.exists(), "the job's secret OPENSSL_CONF loaded its library into the credential helper, on the VM"
