"""The agent's tunables on a deployed VM: terraform's ``agent_env`` reaches the startup script as the instance
attribute zen-agent-env (a JSON object), which writes each ``ZEN_AGENT_*`` variable into the agent's unit. Without
it no deployment could set any tunable but the stop grace (docs/reference/agent.md, "Tunables")."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import zen.agent
from tests.agent.fakes import FakeMetadata

SCRIPT = Path(zen.agent.__file__).with_name("startup.sh")
AGENT_ENV = "instance/attributes/zen-agent-env"


@pytest.fixture
def metadata():
    fake = FakeMetadata({
        "instance/attributes/zen-agent-package": "gs://my-bucket/zen-0.1.0-py3-none-any.whl",
        "instance/attributes/zen-cluster": "4xa100-40gb",
        "instance/zone": "projects/123/zones/us-central1-a",
    })
    yield fake
    fake.close()


def boot(metadata: FakeMetadata, root: Path, agent_env: object) -> tuple[list[str], str]:
    """The agent unit's lines and the script's messages after one boot with zen-agent-env set to ``agent_env``."""
    metadata.values[AGENT_ENV] = json.dumps(agent_env)
    env = {**os.environ, "GCE_METADATA_HOST": metadata.host, "ZEN_STARTUP_ROOT": str(root), "ZEN_STARTUP_DRY_RUN": "1",
           "ZEN_STARTUP_RETRY_S": "0"}
    result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return (root / "etc/systemd/system/zen-agent.service").read_text().splitlines(), result.stderr


def test_a_tunable_set_in_terraform_reaches_the_agents_unit(metadata, tmp_path):
    unit, _ = boot(metadata, tmp_path, {"ZEN_AGENT_PULL_STALL_S": "1800", "ZEN_AGENT_DOCKER": 'my "docker" 100%\\'})

    assert 'Environment="ZEN_AGENT_PULL_STALL_S=1800"' in unit
    # quoted for systemd: its quotes and backslashes escaped, % (a specifier) doubled
    assert 'Environment="ZEN_AGENT_DOCKER=my \\"docker\\" 100%%\\\\"' in unit


def test_a_bad_name_or_value_is_left_out_with_a_message(metadata, tmp_path):
    unit, said = boot(metadata, tmp_path, {
        "ZEN_AGENT_HEARTBEAT_S": "20",
        "ZEN_AGENT_WORK_DIR": "/tmp",  # the script's own: never overridden
        "ZEN_AGENT_LOCAL": "1",  # would run jobs unconfined
        "PATH": "/evil",  # not a tunable
        "ZEN_AGENT_POLL_S": "1\nExecStartPre=/bin/evil",  # a line of its own in the unit
    })

    assert 'Environment="ZEN_AGENT_HEARTBEAT_S=20"' in unit
    assert "Environment=ZEN_AGENT_WORK_DIR=/var/lib/zen-agent/work" in unit
    assert not [line for line in unit if "/tmp" in line or "LOCAL" in line or "PATH=" in line or "evil" in line], unit
    for name in ("'ZEN_AGENT_WORK_DIR' left out", "'ZEN_AGENT_LOCAL' left out", "'PATH' left out",
                 "ZEN_AGENT_POLL_S left out"):
        assert name in said, said


def test_an_attribute_that_is_no_json_object_sets_nothing_and_says_so(metadata, tmp_path):
    unit, said = boot(metadata, tmp_path, ["ZEN_AGENT_POLL_S=2"])
    assert not [line for line in unit if "POLL" in line] and "zen-agent-env is not a JSON object" in said


def test_tunables_that_cannot_be_read_on_a_reboot_keep_the_ones_written_before(metadata, tmp_path):
    """As zen-config's file: a reboot that read them as none changed the unit, and the agent, started by the unit
    already (and maybe running a job it claimed), was restarted, its job ended."""
    before, _ = boot(metadata, tmp_path, {"ZEN_AGENT_PULL_STALL_S": "1800"})
    metadata.failures = {AGENT_ENV: [503] * 10}

    unit, said = boot(metadata, tmp_path, {"ZEN_AGENT_PULL_STALL_S": "1800"})

    assert 'Environment="ZEN_AGENT_PULL_STALL_S=1800"' in unit
    assert unit == before  # (the unit unchanged: no restart for it)
    assert "cannot read instance attribute zen-agent-env; the agent keeps the tunables an earlier boot wrote" in said
