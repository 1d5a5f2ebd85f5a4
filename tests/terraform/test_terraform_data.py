"""Terraform for issue 15: each instance template carries its (cluster, region)'s execution groups,
and the agents' service account reaches jobs' data through the named buckets only.

The tags expression of terraform/main.tf is evaluated for real with ``terraform console`` (no
providers needed: only locals) when the terraform binary is on the PATH, and compared with
``ClusterConfig.tags_of``, the rule the scheduler and the agent apply.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap

import pytest

from tests.terraform.hcl import ROOT, TERRAFORM, Module, main_local
from zen.core.config import ZenConfig

AGENT = "google_service_account.agent["  # one account per (cluster, tag set): google_service_account.agent[<key>]
TAGGED_CONFIG = """
clusters:
  - {name: 4xa100-40gb, gpu_type: nvidia-tesla-a100, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1, us-west1, europe-west4],
     max_vms_per_region: 1, max_vms: 2, tags: [gpu-secure], region_tags: {us-central1: [hipaa, gpu-secure]}}
  - {name: 1xl4, gpu_type: nvidia-l4, gpu_count: 1, machine_type: g2-standard-8, regions: [us-east4], max_vms_per_region: 1, max_vms: 1}
"""


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


def _agent_bindings(module: Module) -> list[tuple[str, str, dict]]:
    def of_agents(body: dict) -> bool:
        member = str(body.get("member", body.get("members")))
        return AGENT in member or (body.get("for_each") == "${google_service_account.agent}" and "each.value.email" in member)

    return [(rtype, name, body) for (rtype, name), body in module.resources.items()
            if rtype.endswith(("_iam_member", "_iam_binding")) and of_agents(body)]


def test_each_template_carries_its_regions_tags_and_the_agent_reads_them(module):
    template = module.resources_of("google_compute_instance_template")["zen"]
    assert re.search(r"\bzen-tags\s*=\s*each\.value\.tags\b", template["metadata"]), template["metadata"]
    assert "local.cluster_region_tags[cluster.name][region]" in module.locals["mig_targets"]
    assert "config_tags" in module.locals
    identity = (ROOT / "shared" / "zen" / "agent" / "identity.py").read_text()
    assert '"instance/attributes/zen-tags"' in identity


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
def test_the_tags_expression_gives_each_region_the_groups_the_code_computes(tmp_path):
    import yaml

    clusters = [{"name": c["name"], "regions": c["regions"]} for c in yaml.safe_load(TAGGED_CONFIG)["clusters"]]
    (tmp_path / "zen.yaml").write_text(TAGGED_CONFIG)
    (tmp_path / "main.tf").write_text(textwrap.dedent("""
        locals { clusters = %s }
        locals {
          zen_config = yamldecode(file("${path.module}/zen.yaml"))
        %s
        %s
          by_region = merge([for cluster, regions in local.cluster_region_tags : {
            for region, tags in regions : "${cluster}/${region}" => tags
          }]...)
        }
        """) % (json.dumps(clusters), main_local("config_tags"), main_local("cluster_region_tags")))
    result = subprocess.run(["terraform", "console"], input="jsonencode(local.by_region)\n", cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    rendered = json.loads(json.loads(result.stdout.strip().splitlines()[-1]))

    config = ZenConfig.model_validate(yaml.safe_load(TAGGED_CONFIG))
    expected = {f"{c.name}/{r}": ",".join(c.tags_of(r)) for c in config.clusters for r in c.regions}
    assert rendered == expected
    assert rendered["4xa100-40gb/us-central1"] == "gpu-secure,hipaa" and rendered["1xl4/us-east4"] == ""


def test_no_project_level_storage_role_is_granted_to_the_agent(module):
    bindings = _agent_bindings(module)
    assert bindings, "no binding of the agent's service account found: the parse is broken"
    custom_roles = module.resources_of("google_project_iam_custom_role")
    for rtype, name, body in bindings:
        if not rtype.startswith(("google_project_", "google_organization_", "google_folder_")):
            continue
        role = body["role"]
        assert not role.startswith("roles/storage."), f"{rtype}.{name} grants {role} on the whole project"
        custom = re.fullmatch(r"\$\{google_project_iam_custom_role\.([\w-]+)\.id\}", role)
        if custom:
            permissions = custom_roles[custom.group(1)]["permissions"]
            assert not [p for p in permissions if p.startswith("storage.")], f"{rtype}.{name}: {permissions}"


def test_the_agent_reads_input_buckets_and_writes_output_buckets_each_by_name(module):
    storage = {name: body for rtype, name, body in _agent_bindings(module)
               if rtype == "google_storage_bucket_iam_member"}
    assert set(storage) == {"agent_reads_wheel", "agent_reads_inputs", "agent_writes_outputs", "agent_keeps_checkpoints"}
    inputs, outputs = storage["agent_reads_inputs"], storage["agent_writes_outputs"]
    assert (inputs["for_each"], inputs["bucket"], inputs["role"]) == (
        "${local.agent_input_bindings}", "${each.value.bucket}", "roles/storage.objectViewer")
    assert (outputs["for_each"], outputs["bucket"], outputs["role"]) == (
        "${local.agent_output_bindings}", "${each.value.bucket}", "roles/storage.objectUser")
    # each bucket, for each agent account
    iam = (TERRAFORM / "iam.tf").read_text()
    assert "setproduct(keys(local.agent_accounts), toset(var.agent_input_buckets))" in iam
    assert "setproduct(keys(local.agent_accounts), toset(var.agent_output_buckets))" in iam
    for variable in ("agent_input_buckets", "agent_output_buckets"):
        assert module.variables[variable]["type"] == "${list(string)}"
        assert module.variables[variable]["default"] == []


def test_each_clusters_agents_keep_only_their_clusters_checkpoints(module):
    """gs://<checkpoints.bucket>/<prefix>/<cluster>/<job_id>/ (zen.core.checkpoints): by name, no listing."""
    binding = module.resources_of("google_storage_bucket_iam_member")["agent_keeps_checkpoints"]
    [condition] = binding["condition"]
    assert binding["role"] == "roles/storage.objectUser" and "each.value.cluster" in condition["title"]
    # every account of the cluster (one per tag set), each on its cluster's prefix
    assert binding["for_each"] == "${local.checkpoint_bucket == null ? {} : local.agent_accounts}"
    assert binding["member"] == "serviceAccount:${google_service_account.agent[each.key].email}"
    assert condition["expression"] == (
        'resource.name.startsWith("projects/_/buckets/${local.checkpoint_bucket}/objects/'
        '${local.checkpoint_prefix}/${each.value.cluster}/")')
    bucket = module.resources_of("google_storage_bucket")["checkpoints"]
    assert bucket["name"] == "${local.checkpoint_bucket}" and bucket["public_access_prevention"] == "enforced"
    assert module.locals["checkpoint_bucket"] == "${try(local.zen_config.checkpoints.bucket, null)}"
    from zen.core.checkpoints import checkpoint_uri

    assert checkpoint_uri("b", "checkpoints", "c", "j") == "gs://b/checkpoints/c/j/"
