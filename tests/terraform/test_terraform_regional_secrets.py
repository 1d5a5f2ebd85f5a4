"""Terraform for a job's secrets: each secret of ``agent_secrets`` is bound to its cluster's agent accounts
through the IAM resource of its kind: a global secret (``NAME``, ``projects/P/secrets/NAME``) with
google_secret_manager_secret_iam_member, a regional one (``projects/P/locations/L/secrets/NAME``) with
google_secret_manager_regional_secret_iam_member, given its project, location and id. The two resources'
``for_each`` are evaluated for real with ``terraform console`` (no providers needed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.terraform.hcl import Module

BINDINGS = {
    "a/hf-token": {"cluster": "c", "account": "a", "secret": "hf-token"},
    "a/projects/p-1/secrets/wandb": {"cluster": "c", "account": "a", "secret": "projects/p-1/secrets/wandb"},
    "a/projects/p-1/locations/europe-west4/secrets/hf-eu": {
        "cluster": "c", "account": "a", "secret": "projects/p-1/locations/europe-west4/secrets/hf-eu"},
}


def _for_each(module: Module, rtype: str, name: str) -> str:
    expression = module.resources_of(rtype)[name]["for_each"]
    assert expression.startswith("${") and expression.endswith("}")
    return expression[2:-1]


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_a_regional_secret_is_bound_by_project_location_and_id(tmp_path):
    module = Module.load()
    regional = module.resources_of("google_secret_manager_regional_secret_iam_member")["agent_reads_regional_secrets"]
    assert (regional["project"], regional["location"], regional["secret_id"]) == (
        "${each.value.project}", "${each.value.location}", "${each.value.secret_id}")
    assert regional["role"] == "roles/secretmanager.secretAccessor"
    (tmp_path / "main.tf").write_text("locals { agent_secret_bindings = %s }\n" % json.dumps(BINDINGS))
    query = "[%s, %s]" % (_for_each(module, "google_secret_manager_secret_iam_member", "agent_reads_secrets"),
                          _for_each(module, "google_secret_manager_regional_secret_iam_member",
                                    "agent_reads_regional_secrets"))
    result = subprocess.run(["terraform", "console"], input=f"jsonencode({query})\n", cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    global_ones, regional_ones = json.loads(json.loads(result.stdout.strip().splitlines()[-1]))

    assert sorted(global_ones) == ["a/hf-token", "a/projects/p-1/secrets/wandb"]
    [(key, binding)] = regional_ones.items()
    assert key == "a/projects/p-1/locations/europe-west4/secrets/hf-eu"
    assert (binding["project"], binding["location"], binding["secret_id"], binding["account"]) == (
        "p-1", "europe-west4", "hf-eu", "a")


def test_the_variable_accepts_a_regional_secret():
    module = Module.load()
    [condition] = [v["condition"] for v in module.variables["agent_secrets"]["validation"]] if isinstance(
        module.variables["agent_secrets"]["validation"], list) else [module.variables["agent_secrets"]["validation"]["condition"]]
    pattern = re.search(r'regex\("(.*?)", s\)', condition).group(1).replace("\\\\", "\\")
    for accepted in ("hf-token", "projects/p-1/secrets/hf-token", "projects/p-1/locations/europe-west4/secrets/hf-eu"):
        assert re.fullmatch(pattern.strip("^$"), accepted), accepted
    assert not re.fullmatch(pattern.strip("^$"), "projects/p-1/locations/europe-west4/secrets/hf-eu/versions/1")
