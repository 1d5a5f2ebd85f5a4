"""The instance template's startup script, in its dry-run mode against a fake metadata server."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import zen.agent
from tests.agent.fakes import FakeMetadata

SCRIPT = Path(zen.agent.__file__).with_name("startup.sh")
CONFIG_YAML = "project: my-project\nclusters: []\n"
SWEEP = "timeout 20 docker ps -aq --filter name=^zen- | xargs -r timeout 60 docker rm -f -v"


@pytest.fixture
def metadata():
    fake = FakeMetadata({
        "instance/attributes/zen-agent-package": "gs://my-bucket/zen-0.1.0-py3-none-any.whl",
        "instance/attributes/zen-cluster": "4xa100-40gb",
        "instance/attributes/zen-config": CONFIG_YAML,
        "instance/zone": "projects/123/zones/us-central1-a",
    })
    yield fake
    fake.close()


def run_script(metadata: FakeMetadata, root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GCE_METADATA_HOST": metadata.host, "ZEN_STARTUP_ROOT": str(root), "ZEN_STARTUP_DRY_RUN": "1"}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def test_the_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_it_installs_the_agent_and_runs_it_as_a_systemd_service(metadata, tmp_path):
    result = run_script(metadata, tmp_path)

    assert result.returncode == 0, result.stderr
    unit = (tmp_path / "etc/systemd/system/zen-agent.service").read_text()
    assert "ExecStart=/opt/zen/venv/bin/python -m zen.agent" in unit
    assert "Environment=ZEN_CONFIG=/etc/zen/config.yaml" in unit
    assert "KillMode=mixed" in unit and "Restart=on-failure" in unit and "TimeoutStopSec=25" in unit
    assert (tmp_path / "etc/zen/config.yaml").read_text() == CONFIG_YAML
    commands = result.stdout.splitlines()
    wheel = f"{tmp_path}/opt/zen/zen-0.1.0-py3-none-any.whl"
    assert f"would run: gcloud storage cp gs://my-bucket/zen-0.1.0-py3-none-any.whl {wheel}" in commands
    assert f"would run: {tmp_path}/opt/zen/venv/bin/pip install --quiet {wheel}" in commands
    assert commands[-1] == "would run: systemctl restart zen-agent.service"


def test_the_agents_shutdown_deadline_comes_well_before_systemd_kills_it():
    """systemd SIGKILLs the agent TimeoutStopSec after its SIGTERM; the agent's final reports must be
    out before, with time left for its VM's STOPPING and closing its control stream."""
    from zen.agent.shutdown import SHUTDOWN_S, VM_STOPPING_S

    margin = int(re.search(r"TimeoutStopSec=\$\(\(STOP_GRACE_S \+ (\d+)\)\)", SCRIPT.read_text())[1])
    assert SHUTDOWN_S + VM_STOPPING_S + 3 <= margin


def test_without_the_package_attribute_it_refuses_with_a_reason(metadata, tmp_path):
    del metadata.values["instance/attributes/zen-agent-package"]
    result = run_script(metadata, tmp_path)
    assert result.returncode == 1 and "zen-agent-package is not set" in result.stderr


def test_the_unit_removes_leftover_job_containers_before_the_agent_starts(metadata, tmp_path):
    """An orphan (the agent crashed, the VM rebooted) is gone before the agent runs, even if the agent
    then fails to start; a failure of this step ("-") does not keep it from starting."""
    assert run_script(metadata, tmp_path).returncode == 0
    lines = (tmp_path / "etc/systemd/system/zen-agent.service").read_text().splitlines()
    sweep = f"ExecStartPre=-/bin/sh -c '{SWEEP}'"
    assert sweep in lines and lines.index(sweep) < lines.index("ExecStart=/opt/zen/venv/bin/python -m zen.agent")


def test_the_unit_removes_the_job_containers_the_agent_leaves_when_it_goes(metadata, tmp_path):
    """A job's container outlived an agent that crashed for good (or exited, or was stopped by hand) until
    another agent started: unfenced, it ran on while Zen ran the job again on another VM. The unit removes
    them as soon as the agent's process is gone ("-": a failure there is no failure of the stop)."""
    assert run_script(metadata, tmp_path).returncode == 0
    lines = (tmp_path / "etc/systemd/system/zen-agent.service").read_text().splitlines()
    assert f"ExecStopPost=-/bin/sh -c '{SWEEP}'" in lines


def test_a_reboot_leaves_the_running_agent_alone_unless_what_it_runs_changed(metadata, tmp_path):
    """On a reboot the enabled unit starts the agent, which may claim a job before this script runs: a
    restart then ended that job PREEMPTED. Only a new package, configuration or unit
    restarts it."""

    def last_command() -> str:
        result = run_script(metadata, tmp_path)
        assert result.returncode == 0, result.stderr
        (tmp_path / "opt/zen/installed").write_text(metadata.values["instance/attributes/zen-agent-package"] + "\n")
        return result.stdout.splitlines()[-1]

    assert last_command() == "would run: systemctl restart zen-agent.service"  # the first boot
    assert last_command() == "would run: systemctl start zen-agent.service"  # a reboot: nothing changed
    metadata.values["instance/attributes/zen-config"] = CONFIG_YAML + "# changed\n"
    assert last_command() == "would run: systemctl restart zen-agent.service"
    assert last_command() == "would run: systemctl start zen-agent.service"
    metadata.values["instance/attributes/zen-agent-package"] = "gs://my-bucket/zen-0.2.0-py3-none-any.whl"
    assert last_command() == "would run: systemctl restart zen-agent.service"
    del metadata.values["instance/attributes/zen-config"]  # the unit changes (no ZEN_CONFIG)
    assert last_command() == "would run: systemctl restart zen-agent.service"
    assert last_command() == "would run: systemctl start zen-agent.service"


def test_docker_gets_credentials_for_the_image_repositories_regions_too(metadata, tmp_path):
    """A regional Artifact Registry repository is reached only through its region's host: docker had
    credentials for the VM's own region and the multi-regions only, so a VM in us-east4 could not pull
    from a repository in us-central1 that terraform let it read (zen-image-locations, from
    agent_image_repositories)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "gcloud").chmod(0o755)
    metadata.values["instance/zone"] = "projects/123/zones/us-east4-b"
    metadata.values["instance/attributes/zen-image-locations"] = '["us-central1","europe"]'
    env = {**os.environ, "GCE_METADATA_HOST": metadata.host, "ZEN_STARTUP_ROOT": str(tmp_path / "root"),
           "ZEN_STARTUP_DRY_RUN": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    [configure] = [line for line in result.stdout.splitlines() if "configure-docker" in line]
    hosts = configure.split()[-1].replace("\\", "").split(",")  # printf %q escapes the commas
    assert hosts[0] == "us-east4-docker.pkg.dev" and "us-central1-docker.pkg.dev" in hosts


def test_a_root_unit_powers_the_vm_off_when_the_agent_asks(metadata, tmp_path):
    """The agent runs unprivileged; a job whose lease ran out and whose container docker cannot kill would run on
    beside its rerun elsewhere, so it writes its fence file (``zen.agent.leftover.fence_vm``) in its runtime folder,
    which a reboot empties, and a root path unit powers the VM off at once."""
    assert run_script(metadata, tmp_path).returncode == 0
    systemd = tmp_path / "etc/systemd/system"
    agent = (systemd / "zen-agent.service").read_text().splitlines()
    assert "RuntimeDirectory=zen-agent" in agent and "Environment=ZEN_AGENT_FENCE_FILE=/run/zen-agent/fence" in agent
    assert "PathExists=/run/zen-agent/fence" in (systemd / "zen-fence.path").read_text().splitlines()
    fence = (systemd / "zen-fence.service").read_text()
    assert "User=" not in fence and "systemctl poweroff --force --force" in fence
    assert "would run: systemctl enable --now zen-fence.path" in run_script(metadata, tmp_path).stdout.splitlines()


def test_the_per_user_limits_every_job_container_shares_are_raised_for_the_vm(metadata, tmp_path):
    """Every job runs as one user (65534), and inotify's limits are per user across every container: one job's file
    watchers (128 instances by default) left another job on the VM none ("Too many open files")."""
    result = run_script(metadata, tmp_path)

    assert result.returncode == 0, result.stderr
    limits = tmp_path / "etc/sysctl.d/60-zen-jobs.conf"
    assert "fs.inotify.max_user_instances = 8192" in limits.read_text().splitlines()
    assert f"would run: sysctl -q -p {limits}" in result.stdout.splitlines()
