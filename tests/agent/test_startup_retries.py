"""The startup script's reads of instance metadata and its installs, when they fail:
``curl --fail || true`` read a 5xx or a timeout as "not set", so one failed read of zen-config wrote
the unit without ZEN_CONFIG and the agent ran on the default configuration, even on a reboot that had
/etc/zen/config.yaml. Only a 404 means "not set" now; other failures are retried, then fail the
script; pip install and the wheel's download are retried. Dry run, against a fake metadata server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.fakes import FakeMetadata
from tests.agent.test_startup_script import CONFIG_YAML, SCRIPT

PACKAGE = "instance/attributes/zen-agent-package"
CONFIG = "instance/attributes/zen-config"


@pytest.fixture
def metadata():
    fake = FakeMetadata({
        PACKAGE: "zen==0.1.0",
        "instance/attributes/zen-cluster": "4xa100-40gb",
        CONFIG: CONFIG_YAML,
        "instance/zone": "projects/123/zones/us-central1-a",
    })
    yield fake
    fake.close()


def run_script(host: str, root: Path, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GCE_METADATA_HOST": host, "ZEN_STARTUP_ROOT": str(root), "ZEN_STARTUP_DRY_RUN": "1",
           "ZEN_STARTUP_RETRY_S": "0", **env}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def unit(root: Path) -> str:
    return (root / "etc/systemd/system/zen-agent.service").read_text()


def reads(metadata: FakeMetadata, path: str) -> int:
    return sum(1 for request in metadata.requests if request.split("?")[0].endswith(path))


def test_a_read_that_fails_is_retried_and_only_a_404_means_not_set(metadata, tmp_path):
    metadata.failures = {PACKAGE: [500, 503], CONFIG: [500]}
    result = run_script(metadata.host, tmp_path)

    assert result.returncode == 0, result.stderr
    assert "Environment=ZEN_CONFIG=/etc/zen/config.yaml" in unit(tmp_path)
    assert (tmp_path / "etc/zen/config.yaml").read_text() == CONFIG_YAML
    assert reads(metadata, PACKAGE) == 3 and reads(metadata, CONFIG) == 2
    assert "HTTP 503 (try 2 of 10)" in result.stderr

    del metadata.values[CONFIG]  # a 404: not set, at the first read
    again = run_script(metadata.host, tmp_path)
    assert again.returncode == 0 and "ZEN_CONFIG" not in unit(tmp_path)
    assert reads(metadata, CONFIG) == 3


def test_a_config_that_cannot_be_read_on_a_reboot_keeps_the_one_written_before(metadata, tmp_path):
    assert run_script(metadata.host, tmp_path).returncode == 0  # the first boot writes it
    metadata.failures = {CONFIG: [503] * 10}

    result = run_script(metadata.host, tmp_path)

    assert result.returncode == 0, result.stderr
    assert "Environment=ZEN_CONFIG=/etc/zen/config.yaml" in unit(tmp_path)
    assert (tmp_path / "etc/zen/config.yaml").read_text() == CONFIG_YAML
    assert "keeping the one an earlier boot wrote" in result.stderr


def test_a_config_that_cannot_be_read_on_the_first_boot_fails_the_script(metadata, tmp_path):
    metadata.failures = {CONFIG: [500] * 10}
    result = run_script(metadata.host, tmp_path)

    assert result.returncode != 0 and "cannot read instance attribute zen-config" in result.stderr
    assert not (tmp_path / "etc/systemd/system/zen-agent.service").exists()


def test_a_metadata_server_that_never_answers_fails_the_script_instead_of_reading_not_set(tmp_path):
    result = run_script("127.0.0.1:9", tmp_path)  # nothing listens on the discard port

    assert result.returncode != 0
    assert "cannot read instance attribute zen-agent-package" in result.stderr
    assert "not set" not in result.stderr


def fails_first(tmp_path: Path, word: str, times: int) -> str:
    """A dry run's stand-in for the commands: one whose argv ends with ``word`` fails ``times`` times."""
    stand_in = tmp_path / "stand-in"
    stand_in.write_text(f"#!{sys.executable}\nimport pathlib, sys\n"
                        f"if sys.argv[-1] == {word!r}:\n"
                        f"    count = pathlib.Path({str(tmp_path / 'count')!r})\n"
                        f"    n = int(count.read_text()) if count.exists() else 0\n"
                        f"    count.write_text(str(n + 1))\n"
                        f"    sys.exit(1 if n < {times} else 0)\n")
    stand_in.chmod(0o755)
    return str(stand_in)


def test_pip_install_is_retried(metadata, tmp_path):
    result = run_script(metadata.host, tmp_path / "root",
                        ZEN_STARTUP_DRY_RUN_EXEC=fails_first(tmp_path, "zen==0.1.0", 2))

    assert result.returncode == 0, result.stderr
    installs = [line for line in result.stdout.splitlines() if line.endswith("pip install --quiet zen==0.1.0")]
    assert len(installs) == 3
    assert (tmp_path / "root/etc/systemd/system/zen-agent.service").exists()


def test_pip_install_failing_every_try_fails_the_script(metadata, tmp_path):
    result = run_script(metadata.host, tmp_path / "root",
                        ZEN_STARTUP_DRY_RUN_EXEC=fails_first(tmp_path, "zen==0.1.0", 100))

    assert result.returncode != 0 and "failed 4 times, giving up" in result.stderr
    assert not (tmp_path / "root/etc/systemd/system/zen-agent.service").exists()
