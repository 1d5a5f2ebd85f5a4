"""The agents' tunables (docs/reference/agent.md, "Tunables") are set in terraform's ``agent_env`` and reach every VM
as the instance attribute zen-agent-env, which the startup script writes into the agent's unit
(tests/agent/test_startup_agent_env.py): no deployment could set any but the stop grace. A name that is no
``ZEN_AGENT_*`` tunable the attribute may set, or a value of more than one line, is refused at plan. The validation is
evaluated by ``terraform console`` where the binary is installed."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.terraform.hcl import TERRAFORM, Module, console, top_block


def test_the_instance_template_gives_the_agent_its_tunables():
    metadata = Module.load().resources_of("google_compute_instance_template")["zen"]["metadata"]
    assert re.search(r"\bzen-agent-env\s*=\s*jsonencode\(var\.agent_env\)", metadata), metadata
    startup = (TERRAFORM.parent / "shared/zen/agent/startup.sh").read_text()
    assert "attribute zen-agent-env" in startup


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
@pytest.mark.parametrize("agent_env, refusal", [
    ({"ZEN_AGENT_PULL_STALL_S": "1800", "ZEN_AGENT_DOCKER": 'my "docker" 100%'}, None),
    ({"PATH": "/usr/bin"}, "each name is ZEN_AGENT_*"),
    ({"ZEN_AGENT_WORK_DIR": "/tmp"}, "each name is ZEN_AGENT_*"),
    ({"ZEN_AGENT_LOCAL": "1"}, "each name is ZEN_AGENT_*"),
    ({"ZEN_AGENT_POLL_S": "1\nExecStartPre=/bin/sh"}, "each value is one line of text"),
])
def test_agent_env_is_refused_at_plan_unless_each_is_a_tunable_on_one_line(tmp_path, agent_env, refusal):
    (tmp_path / "main.tf").write_text(top_block(TERRAFORM / "variables.tf", 'variable "agent_env" {'))
    (tmp_path / "test.tfvars.json").write_text(json.dumps({"agent_env": agent_env}))
    result = console(tmp_path, "jsonencode(var.agent_env)", "test.tfvars.json")
    said = re.sub(r"\x1b\[[0-9;]*m|[\s│]+", " ", result.stdout + result.stderr)  # colours and the box off
    if refusal is None:
        assert result.returncode == 0, said
        assert json.loads(json.loads(result.stdout.strip().splitlines()[-1])) == agent_env
    else:
        assert refusal in said, said
