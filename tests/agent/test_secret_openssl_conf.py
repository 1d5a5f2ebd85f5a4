"""The secret names the docker CLI's credential helper (gcloud's wrapper and its Python) reads are reserved, so
that a job's secret cannot choose a program that runs on the VM outside the container
(tests/agent/test_secret_credential_helper.py). ``OPENSSL_CONF`` was not among them, and the helper's Python
loads the OpenSSL configuration it names, whose ``providers`` section dlopens any shared object: a secret
OPENSSL_CONF pointing at the job's own staged inputs (staged before ``docker run``, at a path fixed by the job
id and attempt) ran the job's code on the VM as the agent's user. Same harness: a docker stand-in that runs the
real ``docker-credential-gcloud``."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys

import pytest

from zen.agent.runner import CannotRun, JobSpec, RunningJob

HELPER = shutil.which("docker-credential-gcloud")
CC = shutil.which("cc") or shutil.which("gcc")


@pytest.mark.skipif(HELPER is None or CC is None, reason="needs docker-credential-gcloud and a C compiler")
def test_a_job_secret_cannot_load_a_library_into_the_docker_credential_helper(tmp_path):
    marker = tmp_path / "ran-on-the-vm"
    source = tmp_path / "evil.c"  # what the job would stage as an input
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void ran(void) '
                      f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    library = tmp_path / "evil.so"
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    conf = tmp_path / "openssl.cnf"
    conf.write_text("openssl_conf = init\n[init]\nproviders = prov\n[prov]\nevil = evil\ndefault = default\n"
                    f"[evil]\nmodule = {library}\nactivate = 1\n[default]\nactivate = 1\n")
    docker = tmp_path / "docker"
    docker.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys\n"
        "if sys.argv[1] == 'run':  # the image is not here: the CLI asks the registry's helper for credentials\n"
        f"    subprocess.run([{HELPER!r}, 'get'], input=b'us-docker.pkg.dev', capture_output=True, timeout=60)\n")
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    spec = JobSpec(job_id="j", attempt=1, image="us-docker.pkg.dev/p/r/img:1", command=["true"],
                   secret_env={"OPENSSL_CONF": str(conf)})

    try:
        job = RunningJob.start(spec, local=False, docker=str(docker))
    except CannotRun:
        return  # refused, as CLOUDSDK_PYTHON now is
    job.outcome()

    assert not marker.exists(), "the job's secret OPENSSL_CONF loaded its library into the credential helper, on the VM"
