"""The agent without root (issue 34): the startup script's unit runs it as the system user zen-agent, in
the docker group, with systemd's hardening, and every folder the agent writes (from its own settings, as
the unit's environment makes them) is one the hardening leaves writable. Read from the script's dry run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from tests.agent.fakes import FakeMetadata
from tests.agent.test_startup_script import CONFIG_YAML, SCRIPT
from zen.agent.journal import JOURNAL_DIR
from zen.agent.settings import AgentSettings

USER = "zen-agent"


@pytest.fixture
def dry_run(tmp_path):
    """(the unit's lines, the commands the script would run), with a gcloud on the PATH."""
    fake = FakeMetadata({
        "instance/attributes/zen-agent-package": "zen==0.1.0",
        "instance/attributes/zen-cluster": "4xa100-40gb",
        "instance/attributes/zen-config": CONFIG_YAML,
        "instance/zone": "projects/123/zones/us-central1-a",
    })
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "gcloud").chmod(0o755)
    env = {**os.environ, "GCE_METADATA_HOST": fake.host, "ZEN_STARTUP_ROOT": str(tmp_path / "root"),
           "ZEN_STARTUP_DRY_RUN": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    try:
        result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    finally:
        fake.close()
    assert result.returncode == 0, result.stderr
    unit = (tmp_path / "root/etc/systemd/system/zen-agent.service").read_text().splitlines()
    return unit, result.stdout.replace(str(tmp_path / "root"), "").splitlines()


def _values(unit: list[str], key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit if line.startswith(key + "=")]


def _under(path: str, folders: list[str]) -> bool:
    return any(PurePosixPath(path).is_relative_to(folder) for folder in folders)


def test_the_agent_runs_as_its_own_user_in_the_docker_group(dry_run):
    unit, _ = dry_run
    assert _values(unit, "User") == [USER] and _values(unit, "Group") == [USER]
    assert _values(unit, "SupplementaryGroups") == ["docker"]  # its containers, through docker's socket


def test_only_the_metadata_guard_runs_as_root(dry_run):
    """iptables needs root: the guard's "+" runs it so; nothing else the unit runs has it."""
    unit, _ = dry_run
    commands = _values(unit, "ExecStartPre") + _values(unit, "ExecStart")
    assert [c for c in commands if c.lstrip("-").startswith("+")] == ["+/opt/zen/guard-metadata.sh"]


def test_the_unit_is_hardened(dry_run):
    unit, _ = dry_run
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                       "PrivateTmp": "yes", "DevicePolicy": "closed", "ProtectKernelTunables": "yes",
                       "ProtectKernelModules": "yes", "ProtectControlGroups": "yes", "RestrictSUIDSGID": "yes"}.items():
        assert _values(unit, key) == [value], key
    # Two capabilities (its jobs' files, written as nobody; the files they hold open, deleted), no other it could gain.
    assert _values(unit, "AmbientCapabilities") == _values(unit, "CapabilityBoundingSet") == [
        "CAP_DAC_OVERRIDE CAP_SYS_PTRACE"]


def test_the_gpus_check_can_open_nvidias_devices_and_no_other(dry_run):
    """``nvidia-smi -L`` after a job's failure (zen.agent.gpucheck) opens /dev/nvidiactl and /dev/nvidia<N>: a private
    /dev (PrivateDevices=yes) has none, nvidia-smi failed on every sound VM, and each job's own failure was taken for
    the VM's GPUs failing (requeued, the VM retired, job after job). NVIDIA's devices, and only those, are allowed."""
    unit, _ = dry_run
    assert _values(unit, "PrivateDevices") in ([], ["no"]), _values(unit, "PrivateDevices")
    assert _values(unit, "DevicePolicy") == ["closed"] and _values(unit, "DeviceAllow") == ["char-nvidia* rw"]


def test_every_folder_the_agent_writes_is_writable_under_the_hardening_and_none_is_in_tmp(dry_run):
    """ProtectSystem=strict leaves only ReadWritePaths writable; PrivateTmp gives the agent a /tmp of its
    own, which docker (mounting a job's folders by path) would not see: the work directory is elsewhere."""
    unit, _ = dry_run
    env = dict(value.split("=", 1) for value in _values(unit, "Environment"))
    settings = AgentSettings.from_env(env)
    writable = [folder for line in _values(unit, "ReadWritePaths") for folder in line.split()]
    home = "/var/lib/zen-agent"  # HOME under User=: gcloud's and docker's own files (credentials helper)
    written = [settings.work_dir, settings.cache_path("some-vm"), os.path.join(settings.work_dir, JOURNAL_DIR), home]
    assert writable and all(_under(path, writable) for path in written), (written, writable)
    assert not [path for path in written if _under(path, ["/tmp", "/var/tmp"])]


def test_the_script_makes_the_user_its_folders_and_its_docker_credentials(dry_run):
    unit, commands = dry_run
    [made] = [c for c in commands if c.startswith("would run: useradd ")]
    assert made.endswith(f"--home-dir /var/lib/zen-agent --shell /usr/sbin/nologin --groups docker {USER}"), made
    assert f"would run: usermod --append --groups docker {USER}" in commands
    assert (f"would run: install -d -o {USER} -g {USER} -m 0750 /var/lib/zen-agent /var/lib/zen-agent/work"
            in commands)
    assert _values(unit, "ReadWritePaths") == ["/var/lib/zen-agent"]
    [configure] = [c for c in commands if "configure-docker" in c]
    assert configure.startswith(f"would run: runuser -u {USER} -- gcloud auth configure-docker --quiet ")


def test_systemd_knows_every_line_of_the_unit(dry_run, tmp_path):
    """A misspelt hardening line is ignored by systemd with a warning, not refused: ask it."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("no systemd-analyze here")
    unit, _ = dry_run
    # Its programs must exist to be verified: the same unit with this machine's.
    text = "\n".join(unit).replace("/opt/zen/venv/bin/python", shutil.which("python3") or "/usr/bin/python3")
    (tmp_path / "zen-agent.service").write_text(text.replace("+/opt/zen/guard-metadata.sh", "+/bin/true") + "\n")
    done = subprocess.run([analyze, "verify", str(tmp_path / "zen-agent.service")], capture_output=True,
                          text=True, timeout=60)
    complaints = [line for line in (done.stdout + done.stderr).splitlines() if "zen-agent.service" in line]
    assert not complaints, complaints
