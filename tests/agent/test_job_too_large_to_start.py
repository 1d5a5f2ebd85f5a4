"""A job Linux will not start (``execve``: E2BIG) fails saying which of its own parts is too large, never quoting a
value: one environment variable over Linux's 128 KiB for one string, or its command, env and secrets together over
what the VM starts a program with. The job's secrets are as many and as large as Zen lets them be (16 of 64 KiB,
Secret Manager's largest) and start on their own. Real processes: the launcher and a stand-in docker CLI."""

from __future__ import annotations

import json
import os
import sys

import pytest

from zen.agent.runner import CannotRun, JobSpec, RunningJob
from zen.core.secrets import MAX_SECRETS

SECRET_BYTES = 64 * 1024  # Secret Manager's largest payload
KERNEL_CAP = 6 * 1024 * 1024  # Linux starts no program with more, whatever the stack's limit (3/4 of 8 MiB)


@pytest.fixture
def docker(tmp_path):
    """A docker CLI that records what it was started with: its argv, and the size of its environment."""
    record, script = tmp_path / "docker.jsonl", tmp_path / "docker"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      f"open({str(record)!r}, 'a').write(json.dumps({{'argv': sys.argv[1:], "
                      f"'env': sorted(os.environ)}}) + '\\n')\n")
    script.chmod(0o755)
    return script, record


def secrets(fill: str) -> dict[str, str]:
    return {f"SECRET_{index}": fill * SECRET_BYTES for index in range(MAX_SECRETS)}


def test_as_many_secrets_as_zen_allows_each_as_large_as_secret_manager_keeps_start(docker):
    script, record = docker
    spec = JobSpec(job_id="j", attempt=1, image="ubuntu", command=["sh"], secret_env=secrets("s"))

    job = RunningJob.start(spec, local=False, docker=str(script))

    assert job.outcome().exit_code == 0
    [call] = [call for line in record.read_text().splitlines() if (call := json.loads(line))["argv"][0] == "run"]
    assert set(spec.secret_env) <= set(call["env"]) and not any("s" * 64 in arg for arg in call["argv"])


def test_one_variable_over_linuxs_limit_for_one_string_is_named(docker):
    script, _ = docker
    spec = JobSpec(job_id="j", attempt=1, image="ubuntu", command=["sh"], env={"SMALL": "a", "BLOB": "b" * 140_000})

    with pytest.raises(CannotRun) as refused:
        RunningJob.start(spec, local=False, docker=str(script))

    assert "env BLOB" in str(refused.value) and "128 KiB" in str(refused.value) and "SMALL" not in str(refused.value)
    assert "bbbb" not in str(refused.value)


def test_command_env_and_secrets_over_what_linux_starts_a_program_with_are_named_without_a_value(docker):
    script, _ = docker
    limit = min(os.sysconf("SC_ARG_MAX"), KERNEL_CAP)  # this machine's, as the VM's is its own
    env = {f"PART_{index}": "e" * 100_000 for index in range(limit // 100_000 + 1)}  # each under 128 KiB
    spec = JobSpec(job_id="j", attempt=1, image="ubuntu", command=["sh"], env=env, secret_env=secrets("s"))

    with pytest.raises(CannotRun) as refused:
        RunningJob.start(spec, local=False, docker=str(script))

    said = str(refused.value)
    assert "env (" in said and f"{MAX_SECRETS} secrets (1024 KiB)" in said and "too large" in said
    assert "ssss" not in said and "eeee" not in said and sys.executable not in said
