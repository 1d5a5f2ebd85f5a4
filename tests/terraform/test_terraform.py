"""Static checks of the deployment in terraform/ (no terraform binary or Google Cloud here).

The module is parsed with python-hcl2 and its wiring checked against the code it deploys: every
variable, local and resource referenced exists; the functions' entry points, topics and environment
match functions/main.py and the library; every (cluster, region) of the default configuration has an
instance template, a MIG and a start subscription with the names and filter the code computes; the
custom roles hold exactly the permissions the code's API calls need. The package built by
scripts/package.py is unpacked and imported without the local-only packages, and checkov must pass.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.terraform.hcl import ROOT, TERRAFORM, Module, block, load, references
from zen.core.config import Topics, ZenConfig, load_config
from zen.core.provisioning import MIG_SUFFIX

sys.path.insert(0, str(ROOT / "scripts"))
import package  # noqa: E402  (scripts/package.py)

DEFAULT_CONFIG = ROOT / "shared" / "zen" / "core" / "default_config.yaml"
FUNCTIONS_MAIN = ROOT / "functions" / "main.py"
LOCAL_ONLY = ("pgserver", "pytest", "hypothesis", "rich", "zen_dev.local", "zen_dev.sim")


@pytest.fixture(scope="module")
def module() -> Module:
    return Module.load()


@pytest.fixture(scope="module")
def tfvars() -> dict:
    return load(TERRAFORM / "terraform.tfvars.example")


@pytest.fixture(scope="module")
def config() -> ZenConfig:
    return load_config(DEFAULT_CONFIG)


def expression(text: str) -> str:
    """``${x}`` -> ``x``."""
    assert text.startswith("${") and text.endswith("}"), text
    return text[2:-1]


# -- structure -----------------------------------------------------------------------------------

def test_module_has_the_house_style_files_and_a_bounded_provider(module):
    assert {"main.tf", "variables.tf", "outputs.tf", "versions.tf", "iam.tf"} <= set(module.files)
    terraform_block = module.files["versions.tf"]["terraform"][0]
    google = terraform_block["required_providers"][0]["google"]
    assert google["source"] == "hashicorp/google"
    assert re.fullmatch(r">= ?[\d.]+, ?< ?[\d.]+", google["version"]), google["version"]
    # a team shares its state in Cloud Storage, not a file on one laptop (bucket given at init)
    assert [list(b) for b in terraform_block["backend"]] == [["gcs"]], terraform_block.get("backend")


def test_every_variable_is_typed_and_described(module):
    assert module.variables
    for name, body in module.variables.items():
        assert "type" in body, f"variable {name} has no type"
        assert len(body.get("description", "")) > 15, f"variable {name} is not described"


def test_every_referenced_variable_and_local_is_declared(module):
    texts = module.all_strings()
    used_vars = {name for (name,) in references(texts, r"\bvar\.([A-Za-z_][\w-]*)")}
    assert used_vars, "no variable is referenced: the parse is broken"
    assert used_vars - set(module.variables) == set()
    used_locals = {name for (name,) in references(texts, r"\blocal\.([A-Za-z_][\w-]*)")}
    assert used_locals - set(module.locals) == set()
    assert set(module.variables) - used_vars == set(), "declared but unused variables"


def test_every_referenced_resource_and_data_source_exists(module):
    texts = module.all_strings()
    used = references(texts, r"(?<![\w.])((?:google|terraform)_[a-z0-9_]+)\.([A-Za-z_][\w-]*)")
    assert ("google_pubsub_topic", "zen") in used
    missing = {ref for ref in used if ref not in module.resources}
    assert missing == set()
    used_data = references(texts, r"\bdata\.(google_[a-z0-9_]+)\.([A-Za-z_][\w-]*)")
    assert used_data - set(module.data) == set()


def test_keyed_references_to_topics_and_service_accounts_exist(module):
    texts = module.all_strings()
    topic_keys = set(module.locals["topic_defaults"])
    used_topics = {key for (key,) in references(texts, r'google_pubsub_topic\.zen\["(\w+)"\]')}
    assert used_topics and used_topics <= topic_keys
    trigger_keys = set(module.locals["trigger_topics"])
    function_keys = set(module.locals["functions"])
    assert trigger_keys == function_keys
    for (resource, key) in references(texts, r'(google_service_account\.function|google_pubsub_topic\.dead_letter)\["(\w+)"\]'):
        assert key in function_keys, f"{resource}[{key!r}]"
    # Service accounts are referenced as google_service_account.<name>: agent, build, function.
    accounts = {name for (name,) in references(texts, r"\bgoogle_service_account\.(\w+)")}
    assert accounts == set(module.resources_of("google_service_account"))


# -- Pub/Sub -------------------------------------------------------------------------------------

def test_topics_are_the_ones_the_code_uses(module):
    assert module.locals["topic_defaults"] == Topics().model_dump()
    topics = module.resources_of("google_pubsub_topic")
    assert expression(topics["zen"]["for_each"]) == "local.topics"
    assert expression(topics["dead_letter"]["for_each"]) == "local.dead_lettered"  # retried triggers only
    assert topics["dead_letter"]["name"] == "${local.topics[each.value]}-dead-letter"


def test_dead_letter_topics_are_kept_and_publishable_by_pubsub(module):
    subscription = module.resources_of("google_pubsub_subscription")["dead_letter"]
    assert expression(subscription["for_each"]) == "local.dead_lettered"
    assert block(subscription["expiration_policy"])["ttl"] == ""
    publisher = module.resources_of("google_pubsub_topic_iam_member")["dead_letter_publisher"]
    assert publisher["role"] == "roles/pubsub.publisher"
    assert "local.pubsub_service_agent" in publisher["member"]


def render(template: str, cluster: str, region: str, module: Module, config: ZenConfig) -> str:
    """Evaluate the few interpolations used in per-(cluster, region) names and filters."""
    values = {
        "each.value.cluster": cluster,
        "each.value.region": region,
        "local.job_start_prefix": config.subscriptions.job_start_prefix,
        'replace(each.value.region, "-", "_")': region.replace("-", "_"),
        "cluster.name": cluster,
        "region": region,
    }

    def substitute(match: re.Match) -> str:
        inner = match.group(1)
        assert inner in values, f"cannot evaluate ${{{inner}}}"
        return values[inner]

    return re.sub(r"\$\{((?:[^{}\"]|\"[^\"]*\")+)\}", substitute, template)


def test_each_cluster_region_has_a_start_subscription_with_the_code_filter(module, config):
    subscription = module.resources_of("google_pubsub_subscription")["job_start"]
    assert expression(subscription["for_each"]) == "local.start_subscriptions"  # one per (cluster, region): test_terraform_start_subscriptions.py
    assert subscription["topic"] == '${google_pubsub_topic.zen["job_start"].id}'
    for cluster in config.clusters:
        for region in cluster.regions:
            assert render(subscription["name"], cluster.name, region, module, config) == \
                config.job_start_subscription(cluster.name, region)
            assert render(subscription["filter"], cluster.name, region, module, config) == \
                ZenConfig.job_start_filter(cluster.name, region)
    # Never expire: a cluster idle for 31 days must keep its subscription.
    assert block(subscription["expiration_policy"])["ttl"] == ""


# -- functions -----------------------------------------------------------------------------------

def cloud_event_functions() -> set[str]:
    tree = ast.parse(FUNCTIONS_MAIN.read_text())
    return {
        node.name for node in tree.body if isinstance(node, ast.FunctionDef)
        and any(ast.unparse(d) == "functions_framework.cloud_event" for d in node.decorator_list)
    }


def topics_read_by_app() -> dict[str, str]:
    """Method on_X of zen.app.Zen -> the config.topics field it is fed from (scale tick: none)."""
    tree = ast.parse((ROOT / "shared" / "zen" / "app.py").read_text())
    zen_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Zen")
    read = {}
    for node in zen_class.body:  # the notifier's (on_job_event) is notifications.tf's: test_notifier_terraform.py
        if isinstance(node, ast.FunctionDef) and node.name.startswith("on_") and node.name != "on_job_event":
            fields = re.findall(r"self\.config\.topics\.(\w+)", ast.unparse(node))
            read[node.name] = fields[0] if fields else "scale_tick"
    return read


def test_each_function_entry_point_exists_in_functions_main(module):
    functions = module.resources_of("google_cloudfunctions2_function")
    # the notifier: notifications.tf (test_notifier_terraform.py); the web console: console.tf (tests/console)
    assert set(functions) == {"zen", "notifier", "console"}
    assert block(functions["console"]["build_config"])["entry_point"] == "console"
    function = functions["zen"]
    assert expression(function["for_each"]) == "local.functions"
    assert block(function["build_config"])["entry_point"] == "${each.key}"
    assert block(functions["notifier"]["build_config"])["entry_point"] == "on_job_event"
    assert set(module.locals["functions"]) | {"on_job_event"} == cloud_event_functions() == {
        "on_job_submitted", "on_heartbeat", "on_stop_requested", "on_scale_tick", "on_job_event"}
    assert set(module.variables["functions"]["default"]) == cloud_event_functions() - {"on_job_event"}


def test_each_function_is_triggered_by_the_topic_its_code_reads(module):
    assert module.locals["trigger_topics"] == topics_read_by_app()
    trigger = block(module.resources_of("google_cloudfunctions2_function")["zen"]["event_trigger"])
    assert trigger["pubsub_topic"] == "${google_pubsub_topic.zen[local.trigger_topics[each.key]].id}"
    assert trigger["retry_policy"] == '${each.value.retry ? "RETRY_POLICY_RETRY" : "RETRY_POLICY_DO_NOT_RETRY"}'
    assert trigger["event_type"] == "google.cloud.pubsub.topic.v1.messagePublished"
    assert trigger["service_account_email"] == "${google_service_account.function[each.key].email}"


def test_functions_get_the_environment_the_library_reads(module):
    service = block(module.resources_of("google_cloudfunctions2_function")["zen"]["service_config"])
    assert service["service_account_email"] == "${google_service_account.function[each.key].email}"
    assert service["ingress_settings"] == "ALLOW_INTERNAL_ONLY"
    env_text = service["environment_variables"]
    library = "".join((ROOT / "shared" / "zen" / p).read_text()
                      for p in ("store/db.py", "store/connect.py", "app.py", "core/config.py"))
    for name in ("ZEN_CLOUDSQL_INSTANCE", "ZEN_DB_USER", "ZEN_DB_NAME", "ZEN_CLOUDSQL_IP_TYPE", "ZEN_PROJECT",
                 "ZEN_SCALING", "ZEN_CONFIG", "ZEN_DB_MAX_OPEN", "ZEN_DB_QUERY_TIMEOUT_S",
                 "ZEN_FUNCTION_TIMEOUT_S"):
        assert f"{name} " in env_text or f"{name} =" in env_text, f"{name} not set on the functions"
        assert f'"{name}"' in library, f"the library does not read {name}"
    # The archive puts a shipped configuration where ZEN_CONFIG points.
    assert module.locals["shipped_config_path"].startswith("/workspace/")
    assert '"zen_config.yaml"' in module.locals["shipped_config_path"] and package.CONFIG_NAME == "zen_config.yaml"


def test_the_source_object_is_named_after_the_archive_hash(module):
    source = module.resources_of("google_storage_bucket_object")["functions_source"]
    assert "filesha256(local.functions_archive)" in source["name"]
    storage = block(block(block(module.resources_of("google_cloudfunctions2_function")["zen"]["build_config"])["source"])["storage_source"])
    assert storage["object"] == "${google_storage_bucket_object.functions_source.name}"


def test_scale_tick_job_publishes_every_minute(module):
    job = module.resources_of("google_cloud_scheduler_job")["scale_tick"]
    assert expression(job["schedule"]) == "var.scale_tick_schedule"
    assert module.variables["scale_tick_schedule"]["default"] == "* * * * *"
    assert block(job["pubsub_target"])["topic_name"] == '${google_pubsub_topic.zen["scale_tick"].id}'


# -- compute -------------------------------------------------------------------------------------

def test_the_clusters_are_the_configurations_and_the_example_sets_only_what_terraform_needs(tfvars, config):
    """One list of clusters, in the Zen configuration: terraform reads it (clusters.tf); the example's
    cluster_settings holds only what terraform alone needs (zones), for clusters the configuration has."""
    assert "clusters" not in tfvars
    assert set(tfvars["cluster_settings"]) <= {c.name for c in config.clusters}
    module = Module.load()
    assert module.variables["clusters"]["default"] is None  # deprecated, read only when given
    assert "for c in local.zen_config.clusters" in module.locals["clusters"]
    # A var.clusters still given is held to the configuration: a precondition on the MIGs.
    compute = module.resources_of("google_compute_region_instance_group_manager")["zen"]
    preconditions = block(compute["lifecycle"])["precondition"]
    assert any(p["condition"] == "${local.clusters_match}" for p in preconditions)
    assert any("unknown_cluster_settings" in p["condition"] for p in preconditions)


def test_each_cluster_region_has_a_template_and_a_mig(module, tfvars, config):
    templates = module.resources_of("google_compute_instance_template")
    migs = module.resources_of("google_compute_region_instance_group_manager")
    assert set(templates) == set(migs) == {"zen"}
    assert expression(templates["zen"]["for_each"]) == expression(migs["zen"]["for_each"]) == "local.mig_targets"
    assert migs["zen"]["version"][0]["instance_template"] == "${google_compute_instance_template.zen[each.key].id}"
    # local.mig_targets: one entry per region of each cluster of the configuration, named like the code.
    mig_targets = module.locals["mig_targets"]
    assert "for cluster in local.clusters" in mig_targets and "for region in cluster.regions" in mig_targets
    assert "for i, model in local.cluster_provisioning[cluster.name]" in mig_targets  # a MIG per pool
    primary, secondary = re.search(r'mig_name\s*=\s*i == 0 \? "([^"]+)" : "([^"]+)"', mig_targets).groups()
    suffixes = module.locals["mig_suffix"]
    assert suffixes == MIG_SUFFIX  # the code's rule (zen.core.provisioning)
    for cluster in config.clusters:
        for region in cluster.regions:
            assert render(primary, cluster.name, region, module, config) == cluster.mig_name(region)
            for model in ("spot", "standard", "flex-start"):  # another model's pool: its MIG's suffix
                other = cluster.model_copy(update={"provisioning": [m for m in ("standard", "spot") if m != model]
                                                   + [model]})
                named = render(secondary.replace("${local.mig_suffix[model]}", suffixes[model]), cluster.name,
                               region, module, config)
                assert named == other.mig_name(region, model)
    assert expression(migs["zen"]["name"]) == "each.value.mig_name"
    # VMs are named after the base plus 4 random characters: without the region in it, two regions of
    # one cluster could name a VM alike, and Zen keys VMs by name.
    assert expression(migs["zen"]["base_instance_name"]) == "each.value.mig_name"
    # ... and a MIG made with the old base is kept as it is: changing the base replaces the MIG, VMs and all.
    assert "base_instance_name" in block(migs["zen"]["lifecycle"])["ignore_changes"]


def test_migs_are_sized_by_zen_only(module):
    mig = module.resources_of("google_compute_region_instance_group_manager")["zen"]
    assert mig["target_size"] == 0
    assert "target_size" in block(mig["lifecycle"])["ignore_changes"]
    assert "auto_healing_policies" not in mig
    assert set(re.findall(r"ANY[A-Z_]*", mig["distribution_policy_target_shape"])) == {"ANY", "ANY_SINGLE_ZONE"}
    assert block(mig["update_policy"])["type"] == "OPPORTUNISTIC"
    autoscalers = [t for (t, _) in module.resources if "autoscaler" in t]
    assert autoscalers == []


def test_instance_template_starts_the_agent(module):
    template = module.resources_of("google_compute_instance_template")["zen"]
    script = re.fullmatch(r'\$\{file\("\$\{path\.module\}/([^"]+)"\)\}', template["metadata_startup_script"])
    assert script, template["metadata_startup_script"]
    startup = (TERRAFORM / script.group(1)).resolve()
    assert startup == ROOT / "shared" / "zen" / "agent" / "startup.sh"
    startup_text = startup.read_text()
    metadata = template["metadata"]
    for attribute in ("zen-cluster", "zen-agent-package", "zen-config"):
        assert attribute in metadata, f"instance attribute {attribute} is not set"
        assert f"attribute {attribute}" in startup_text or attribute == "zen-cluster"
    identity = (ROOT / "shared" / "zen" / "agent" / "identity.py").read_text()
    assert "instance/attributes/zen-cluster" in identity
    assert block(template["guest_accelerator"])["count"] == "${each.value.gpu_count}"
    # Each region's VMs run as their cluster's account for that region's tags (iam.tf: IAM tells clusters,
    # and a cluster's regions with different tags, apart).
    assert block(template["service_account"])["email"] == (
        "${google_service_account.agent[local.agent_account_of[each.value.cluster][each.value.region]].email}")
    shielded = block(template["shielded_instance_config"])
    assert shielded["enable_vtpm"] is True and shielded["enable_integrity_monitoring"] is True
    scheduling = block(template["scheduling"])
    assert scheduling["on_host_maintenance"] == "TERMINATE"
    interface = block(template["network_interface"])
    assert "access_config" not in interface, "an external IP only through the dynamic block"
    dynamic = block(interface["dynamic"])["access_config"]
    assert "var.agent_external_ip" in dynamic["for_each"]
    assert module.variables["agent_external_ip"]["default"] is False


# -- Cloud SQL -----------------------------------------------------------------------------------

def test_cloud_sql_is_iam_only_backed_up_and_protected(module):
    instance = module.resources_of("google_sql_database_instance")["zen"]
    settings = block(instance["settings"])
    flags = {f["name"]: f["value"] for f in settings["database_flags"]}
    assert flags["cloudsql.iam_authentication"] == "on"
    backups = block(settings["backup_configuration"])
    assert backups["enabled"] is True and backups["point_in_time_recovery_enabled"] is True
    assert expression(instance["deletion_protection"]) == "var.db_deletion_protection"
    assert module.variables["db_deletion_protection"]["default"] is True
    assert settings["connector_enforcement"] == "REQUIRED"
    network = block(settings["ip_configuration"])
    assert expression(network["ipv4_enabled"]) == "var.db_public_ip"
    assert module.variables["db_public_ip"]["default"] is False
    users = module.resources_of("google_sql_user")["functions"]
    assert users["type"] == "CLOUD_IAM_SERVICE_ACCOUNT"
    assert expression(users["for_each"]) == "google_service_account.function"
    assert 'trimsuffix(each.value.email, ".gserviceaccount.com")' in users["name"]


# -- IAM -----------------------------------------------------------------------------------------

# Compute client method (zen.adapters.compute) -> the IAM permission it needs.
COMPUTE_PERMISSIONS = {
    "get": "compute.instanceGroupManagers.get",
    "list": "compute.instanceGroupManagers.list",
    "list_managed_instances": "compute.instanceGroupManagers.get",
    "list_errors": "compute.instanceGroupManagers.get",
    "resize": "compute.instanceGroupManagers.update",
    "resize_unary": "compute.instanceGroupManagers.update",
    "delete_instances": "compute.instanceGroupManagers.update",
    "delete_instances_unary": "compute.instanceGroupManagers.update",
}
# RegionOperationsClient method (zen.adapters.compute) -> permission.
OPERATION_PERMISSIONS = {"get": "compute.regionOperations.get", "wait": "compute.regionOperations.get",
                         "list": "compute.regionOperations.list"}
# Pub/Sub subscriber method (zen.agent.transport, zen.adapters.control_subscriptions) -> permission.
SUBSCRIPTION_PERMISSIONS = {
    "get_subscription": "pubsub.subscriptions.get",
    "create_subscription": "pubsub.subscriptions.create",
    "delete_subscription": "pubsub.subscriptions.delete",
    "get_iam_policy": "pubsub.subscriptions.getIamPolicy",
    "set_iam_policy": "pubsub.subscriptions.setIamPolicy",
}
# Zen makes the control subscriptions; an agent only checks its own (get) and consumes what its
# cluster was granted. Its create and delete calls are for stacks where agents may (the local one): in
# a deployment they are refused (it waits for Zen's, or refuses to start on a wrong one).


def test_compute_custom_roles_hold_exactly_what_the_scheduler_calls(module):
    source = (ROOT / "shared" / "zen" / "adapters" / "compute.py").read_text()
    calls = set(re.findall(r"self\._(migs|operations)\.(\w+)", source))
    assert calls, "no Compute call found in mig.py"
    known = {("migs", c) for c in COMPUTE_PERMISSIONS} | {("operations", c) for c in OPERATION_PERMISSIONS}
    assert calls <= known, f"unmapped Compute calls: {calls - known}"
    needed = {(COMPUTE_PERMISSIONS if client == "migs" else OPERATION_PERMISSIONS)[c] for client, c in calls}
    roles = module.resources_of("google_project_iam_custom_role")
    granted = {name: set(roles[name]["permissions"]) for name in ("mig_scaler", "compute_reader", "compute_lister")}
    assert set().union(*granted.values()) == needed
    # Listing every MIG of a region (no name condition can limit it) is the tick's alone: a submission's
    # pass reads each MIG by name (get, under mig_scaler's zen-* condition).
    assert granted["compute_lister"] == {"compute.instanceGroupManagers.list"}
    assert "compute.instanceGroupManagers.list" not in granted["compute_reader"] | granted["mig_scaler"]
    lister = module.resources_of("google_project_iam_member")["compute_lister"]
    assert "for_each" not in lister and 'function["on_scale_tick"]' in lister["member"]
    binding = module.resources_of("google_project_iam_member")["mig_scaler"]
    # By name, not by resource.type (test_terraform_access: a regional MIG's type is not certain).
    assert "resource.type" not in block(binding["condition"])["expression"]
    assert 'startsWith("zen-")' in block(binding["condition"])["expression"]


def test_the_tick_alone_may_read_the_gpu_quotas_it_reads(module):
    source = (ROOT / "shared" / "zen" / "adapters" / "quotas.py").read_text()
    calls = set(re.findall(r"\b(regions|projects)\.get\(", source))
    assert calls == {"regions", "projects"}
    role = module.resources_of("google_project_iam_custom_role")["quota_reader"]
    assert set(role["permissions"]) == {f"compute.{c}.get" for c in calls}
    binding = module.resources_of("google_project_iam_member")["quota_reader"]
    assert "for_each" not in binding and 'function["on_scale_tick"]' in binding["member"]


def test_agent_custom_role_holds_only_the_check_of_its_control_subscription(module):
    source = (ROOT / "shared" / "zen" / "agent" / "transport.py").read_text()
    calls = set(re.findall(r"self\._subscriber\.(\w+)", source)) & set(SUBSCRIPTION_PERMISSIONS)
    assert calls == {"get_subscription", "create_subscription", "delete_subscription"}
    role = module.resources_of("google_project_iam_custom_role")["agent_subscriptions"]
    assert role["permissions"] == ["pubsub.subscriptions.get"]  # no create, delete or consume project-wide
    topic_bindings = module.resources_of("google_pubsub_topic_iam_member")
    assert "agent_vm_control" not in topic_bindings  # attaching to zen-vm-control is the tick's alone
    assert topic_bindings["agent_heartbeats"]["role"] == "roles/pubsub.publisher"
    start = module.resources_of("google_pubsub_subscription_iam_member")["agent_job_start"]
    assert expression(start["for_each"]) == "google_pubsub_subscription.job_start"
    # Each (cluster, region) start subscription is readable by the account of that region's VMs alone.
    assert start["member"] == ("serviceAccount:${google_service_account.agent[local.agent_account_of["
                               "local.mig_targets[each.key].cluster][local.mig_targets[each.key].region]].email}")
    # and the notifier's subscription, which the Pub/Sub service agent reads to forward dead letters
    assert set(module.resources_of("google_pubsub_subscription_iam_member")) == {"agent_job_start",
                                                                                 "notifier_dead_letter_subscriber"}


def test_the_tick_makes_control_subscriptions_and_grants_each_to_its_clusters_agents(module):
    source = (ROOT / "shared" / "zen" / "adapters" / "control_subscriptions.py").read_text()
    calls = set(re.findall(r"self\._subscriber\.(\w+)", source)) & set(SUBSCRIPTION_PERMISSIONS)
    role = module.resources_of("google_project_iam_custom_role")["control_subscriptions"]
    assert set(role["permissions"]) == {SUBSCRIPTION_PERMISSIONS[c] for c in calls}
    assert "pubsub.subscriptions.consume" not in role["permissions"]
    assert "delete_subscription" in calls  # of a VM its MIG no longer lists (the topic holds 10,000 at most)
    binding = module.resources_of("google_project_iam_member")["control_subscriptions"]
    assert 'function["on_scale_tick"]' in binding["member"] and "for_each" not in binding
    attach = module.resources_of("google_pubsub_topic_iam_member")["tick_attaches_control"]
    assert attach["topic"] == '${google_pubsub_topic.zen["vm_control"].name}' and 'function["on_scale_tick"]' in attach["member"]
    function = module.resources_of("google_cloudfunctions2_function")["zen"]
    env = block(function["service_config"])["environment_variables"]
    assert "ZEN_AGENT_ACCOUNTS" in env and 'each.key == "on_scale_tick"' in env
    assert "local.agent_accounts_env" in env
    # cluster -> region -> the email of the account that region's VMs run as (zen.adapters.control_subscriptions)
    accounts_env = module.locals["agent_accounts_env"]
    assert "local.agent_account_of" in accounts_env and "google_service_account.agent[key].email" in accounts_env
    agent = module.resources_of("google_service_account")["agent"]
    assert expression(agent["for_each"]) == "local.agent_accounts"


def test_no_broad_roles_and_project_bindings_are_the_justified_few(module):
    broad = re.compile(r"roles/(owner|editor|viewer|[a-z]+\.admin|compute\.instanceAdmin.*|pubsub\.editor)$")
    for rtype, name in module.resources:
        if rtype.endswith(("_iam_member", "_iam_binding")):
            assert not broad.search(module.resources[(rtype, name)].get("role", "")), f"{rtype}.{name}"
    assert not [t for (t, _) in module.resources if t.endswith(("_iam_policy", "_iam_binding"))], \
        "authoritative IAM resources would remove other bindings"
    project_bindings = set(module.resources_of("google_project_iam_member"))
    assert project_bindings == {"sql", "mig_scaler", "compute_reader", "compute_lister", "agent_subscriptions",
                                "control_subscriptions", "agent_logs", "build_logs", "build_reads_gcf_sources",
                                "log_readers",  # zen logs: Cloud Logging grants reading by project
                                "quota_reader",  # the tick's GPU quotas: regions and projects have no IAM of their own
                                # the notifier: Cloud SQL, and users' notification secrets (notifications.tf)
                                "notifier_sql", "notifier_reads_notify_secrets",
                                # the web console: Cloud SQL, and the jobs' output as zen logs reads it (console.tf)
                                "console_sql", "console_reads_logs"}
    for name in ("sql", "mig_scaler", "build_reads_gcf_sources", "notifier_sql", "notifier_reads_notify_secrets",
                 "console_sql"):
        assert "condition" in module.resources_of("google_project_iam_member")[name], f"{name} is unconditioned"


def test_functions_publish_only_to_the_outbox_topics(module):
    assert module.locals["function_publishes"] == ["job_start", "vm_control", "job_events"]
    jobs = "".join((ROOT / "shared" / "zen" / "jobs" / name).read_text() for name in ("service.py", "announce.py"))
    published = set(re.findall(r"outgoing\(self\._topics\.(\w+)", jobs))
    assert published == set(module.locals["function_publishes"])


# -- outputs -------------------------------------------------------------------------------------

def test_outputs_tell_the_user_how_to_submit_and_where_to_look(module):
    assert {"topics", "submit_job_command", "log_query", "logs_explorer_url"} <= set(module.outputs)
    assert "gcloud pubsub topics publish" in module.outputs["submit_job_command"]["value"]
    assert 'google_pubsub_topic.zen["job_submitted"]' in module.outputs["submit_job_command"]["value"]
    for command in ("submit_job_command", "stop_job_command"):  # with the sender's ID token (submitter_auth)
        value = module.outputs[command]["value"]
        assert "local.sender_proof" in value and '--attribute="$A"' in value, value


def test_the_job_output_query_is_the_one_zen_logs_uses(module):
    from zen.adapters.cloud_logging import job_filter

    assert {"job_logs_query", "job_logs_explorer_url"} <= set(module.outputs)
    query = module.locals["job_logs_query"].replace("${var.project_id}", "my-project").replace("JOB_ID", "job-7")
    assert query == job_filter("my-project", "job-7")


# -- the package ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    manifest = package.build(out)
    return out, manifest


def test_package_is_reproducible_and_the_manifest_matches(packaged, tmp_path):
    out, manifest = packaged
    again = package.build(tmp_path)
    assert again == manifest
    assert hashlib.sha256((out / manifest["functions_archive"]).read_bytes()).hexdigest() == manifest["functions_sha256"]
    assert manifest["config"] is None and manifest["config_sha256"] is None


def test_package_ships_the_runtime_requirements_and_no_local_only_code(packaged):
    out, manifest = packaged
    with zipfile.ZipFile(out / manifest["functions_archive"]) as archive:
        names = set(archive.namelist())
        requirements = archive.read("requirements.txt").decode()
    assert {"main.py", "requirements.txt", "zen/__init__.py", "zen/core/default_config.yaml",
            "zen/store/queries.sql", "zen/agent/startup.sh"} <= names
    assert any(n.startswith("zen/store/migrations/") for n in names)
    assert not [n for n in names if n.startswith(("zen_dev/local/", "zen_dev/sim/")) or n == "zen_dev/demo/scripted.py"]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # the runtime pins, then the functions-only ones (the Cloud Billing client, not in the agent's wheel), then
    # everything those require at constraints.txt's versions: Cloud Functions' build installs what the tests ran with
    direct = (ROOT / "requirements.txt").read_text() + "\n" + (ROOT / "requirements-functions.txt").read_text()
    assert requirements.startswith(direct)
    pinned = [line for line in requirements[len(direct):].splitlines() if line and not line.startswith("#")]
    constraints = set((ROOT / "constraints.txt").read_text().splitlines())
    assert pinned and set(pinned) <= constraints and any(line.startswith("grpcio==") for line in pinned)
    for local_only in ("pgserver", "pytest", "hypothesis", "rich"):
        assert not re.search(rf"^{local_only}\b", requirements, re.M | re.I)


_IMPORT_PROBE = """
import importlib, importlib.abc, pkgutil, sys
BLOCKED = {blocked!r}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"local-only module imported in the deployed code: {{name}}")
        return None

sys.meta_path.insert(0, Block())
sys.path.insert(0, {root!r})
import main
import zen
assert zen.__file__.startswith({root!r}), zen.__file__
for info in pkgutil.walk_packages(zen.__path__, "zen."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
entry_points = sorted(n for n in ("on_job_submitted", "on_heartbeat", "on_stop_requested", "on_scale_tick",
                                  "on_job_event")
                      if callable(getattr(main, n, None)))
print(",".join(entry_points))
"""


def test_packaged_functions_import_without_local_only_packages(packaged, tmp_path):
    out, manifest = packaged
    with zipfile.ZipFile(out / manifest["functions_archive"]) as archive:
        archive.extractall(tmp_path)
    probe = _IMPORT_PROBE.format(blocked=LOCAL_ONLY, root=str(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEN_")}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "on_heartbeat,on_job_event,on_job_submitted,on_scale_tick,on_stop_requested"


def test_every_package_the_archives_code_imports_is_in_its_requirements(packaged, tmp_path):
    """Each module the deployed code imports, at the top or inside a function (the console's Cloud Logging
    reader, the tick's billing client: imported at first use, so no import of the package finds them), comes
    from a distribution the archive's requirements.txt installs (the console streamed no job output: its
    Cloud Logging client was in the agent's wheel alone). Local-only modules are the probe's (above)."""
    import importlib.metadata
    import importlib.util

    out, manifest = packaged
    with zipfile.ZipFile(out / manifest["functions_archive"]) as archive:
        archive.extractall(tmp_path)
    installed = {re.split(r"[=<>!~\[ ;]", line, maxsplit=1)[0].lower().replace("_", "-")
                 for line in (tmp_path / "requirements.txt").read_text().splitlines() if line and line[0] != "#"}
    owners = {}  # a file -> the distribution that installed it (its directory resolved once, not each file)
    for dist in importlib.metadata.distributions():
        base, name = str(Path(dist.locate_file("")).resolve()), dist.metadata["Name"].lower().replace("_", "-")
        for file in dist.files or ():
            owners[os.path.normpath(os.path.join(base, str(file)))] = name
    missing = {}
    for path in tmp_path.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [f"{node.module}.{a.name}" for a in node.names] + [node.module]
                     if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for name in names:
                if name.split(".")[0] in ("zen", "main") or name.split(".")[0] in sys.stdlib_module_names or any(
                        name == b or name.startswith(b + ".") for b in LOCAL_ONLY):
                    continue
                try:
                    spec = importlib.util.find_spec(name)
                except (ImportError, ValueError):  # ``from package import name``: a name, not a module
                    continue
                owner = owners.get(str(Path(spec.origin).resolve())) if spec and spec.origin else None
                if owner is not None and owner not in installed:
                    missing.setdefault(owner, set()).add(f"{path.relative_to(tmp_path)}: {name}")
    assert not missing, missing


def test_agent_wheel_is_installable_shape(packaged):
    out, manifest = packaged
    wheel = out / manifest["agent_wheel"]
    assert re.fullmatch(r"zen-[\d.]+-py3-none-any\.whl", wheel.name)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{dist_info}/METADATA").decode()
        record = archive.read(f"{dist_info}/RECORD").decode().splitlines()
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            if digest:
                data = archive.read(name)
                expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert digest == f"sha256={expected}" and int(size) == len(data), name
        assert {line.rsplit(",", 2)[0] for line in record} == set(names)
    requires = re.findall(r"^Requires-Dist: (.+)$", metadata, re.M)
    # The agent ships job output with the Cloud Logging client (the functions' archive has it from
    # requirements-functions.txt, for the console; requirements.txt does not). Then every
    # package those require, pinned at constraints.txt's version (tests/test_package_pins.py).
    direct = package.runtime_requirements() + package.runtime_requirements(package.AGENT_REQUIREMENTS)
    assert requires[:len(direct)] == direct and requires == package.pinned_closure(direct)
    assert any(r.startswith("google-cloud-logging==") for r in requires)
    names_required = [re.split(r"[=<>!~\[ ;]", r, maxsplit=1)[0].lower() for r in requires]
    assert len(names_required) == len(set(names_required)), "a package is required twice"
    assert not any(r.startswith("google-cloud-logging") for r in package.runtime_requirements())
    assert "zen = zen.cli.main:main" in entry_points
    assert "zen/agent/__main__.py" in names and "zen/agent/startup.sh" in names
    assert not [n for n in names if n.startswith("zen_dev/")]


def test_package_ships_a_given_configuration(tmp_path):
    manifest = package.build(tmp_path, DEFAULT_CONFIG)
    assert manifest["config_sha256"] == hashlib.sha256(DEFAULT_CONFIG.read_bytes()).hexdigest()
    with zipfile.ZipFile(tmp_path / manifest["functions_archive"]) as archive:
        assert archive.read(package.CONFIG_NAME) == DEFAULT_CONFIG.read_bytes()


# -- the dead-letter hook ------------------------------------------------------------------------

def test_dead_letter_script_configures_the_eventarc_subscription(tmp_path):
    calls = tmp_path / "calls"
    fake = tmp_path / "gcloud"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f"printf '%s\\n' \"$*\" >> {calls}\n"
        'if [[ "$1 $2 $3" == "eventarc triggers describe" ]]; then echo projects/p/subscriptions/eventarc-sub; fi\n'
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}",
           "TRIGGER": "projects/p/locations/us-central1/triggers/zen-on-heartbeat-123",
           "DEAD_LETTER_TOPIC": "projects/p/topics/zen-heartbeats-dead-letter",
           "MAX_DELIVERY_ATTEMPTS": "10", "PUBSUB_SERVICE_AGENT": "service-1@gcp-sa-pubsub.iam.gserviceaccount.com",
           "ACK_DEADLINE_S": "60"}
    script = TERRAFORM / "scripts" / "attach_dead_letter.sh"
    result = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    lines = calls.read_text().splitlines()
    assert lines[0].startswith("eventarc triggers describe zen-on-heartbeat-123 --project=p --location=us-central1")
    assert lines[1].startswith("pubsub subscriptions update projects/p/subscriptions/eventarc-sub")
    assert "--dead-letter-topic=projects/p/topics/zen-heartbeats-dead-letter" in lines[1]
    assert "--max-delivery-attempts=10" in lines[1]
    assert "--ack-deadline=60" in lines[1]  # Eventarc's 10 s redelivered any request served longer
    assert "add-iam-policy-binding projects/p/subscriptions/eventarc-sub" in lines[2]
    assert "--member=serviceAccount:service-1@gcp-sa-pubsub.iam.gserviceaccount.com" in lines[2]

    bad = subprocess.run([str(script)], env={**env, "TRIGGER": "zen-on-heartbeat"}, capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 2 and "TRIGGER must look like" in bad.stderr


def test_dead_letter_hook_is_wired_to_each_trigger(module):
    hook = module.resources_of("terraform_data")["trigger_dead_letter"]
    assert "local.dead_lettered" in hook["for_each"] and "var.attach_dead_letter_topics" in hook["for_each"]
    exec_block = block(block(hook["provisioner"])["local-exec"])
    assert exec_block["command"] == "${path.module}/scripts/attach_dead_letter.sh"
    assert exec_block["environment"]["TRIGGER"] == "${google_cloudfunctions2_function.zen[each.key].event_trigger[0].trigger}"
    assert exec_block["environment"]["ACK_DEADLINE_S"] == "${tostring(min(600, max(10, var.functions[each.key].timeout_s)))}"


# -- checkov -------------------------------------------------------------------------------------

CHECKOV = Path(os.environ.get("ZEN_CHECKOV", ROOT / ".venv-tools" / "bin" / "checkov"))


def test_checkov_passes_with_only_the_justified_skips():
    if not CHECKOV.exists():
        pytest.skip(f"checkov is not installed at {CHECKOV}: run `make tools` (make test does)")
    config = TERRAFORM / ".checkov.yaml"
    skips = re.findall(r"^\s*-\s*(CKV\w+)", config.read_text(), re.M)
    assert 0 < len(skips) <= 8, "keep the skip list short"
    result = subprocess.run([str(CHECKOV), "-d", "terraform", "--config-file", str(config), "--output", "json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    summary = {key: sum(r["summary"][key] for r in reports) for key in ("passed", "failed", "parsing_errors")}
    failed = [f"{c['check_id']} {c['resource']}" for r in reports for c in r["results"]["failed_checks"]]
    assert summary["failed"] == 0, failed
    assert summary["parsing_errors"] == 0
    assert summary["passed"] >= 50, summary
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.skipif(__import__("shutil").which("terraform") is None, reason="the terraform binary is not installed")
def test_terraform_itself_loads_the_module(tmp_path):
    """``terraform validate`` on a copy of the module. Without network the google provider cannot be
    installed, so validation stops at "Missing required provider"; terraform loads the module before
    that and reports what python-hcl2 does not check: a name defined twice (two ``locals`` named
    ``job_logs_query`` once made the module impossible to plan), a malformed block. Any error but the
    missing provider fails the test."""
    for source in TERRAFORM.glob("*.tf"):
        (tmp_path / source.name).write_text(source.read_text())
    result = subprocess.run(["terraform", "validate", "-no-color"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"})
    errors = re.findall(r"Error: (.+)", result.stdout + result.stderr)
    assert set(errors) <= {"Missing required provider"}, result.stdout + result.stderr


@pytest.mark.skipif(__import__("shutil").which("terraform") is None, reason="the terraform binary is not installed")
def test_the_module_is_formatted_as_terraform_fmt_writes_it():
    """``terraform fmt -check`` (no provider needed): it failed on four files, which nothing checked."""
    result = subprocess.run(["terraform", "fmt", "-check", "-recursive", "-no-color", "terraform"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"not formatted (run terraform fmt -recursive terraform): {result.stdout}"


def test_a_budget_alerts_on_the_projects_spend_when_a_billing_account_is_given(module):
    """The defaults allow 20 GPU VMs (`zen clusters` prints the worst case) and nothing warned on spend."""
    budget = module.resources[("google_billing_budget", "zen")]
    assert budget["count"] == "${var.billing_account == null ? 0 : 1}"
    assert budget["budget_filter"][0]["projects"] == ["projects/${data.google_project.this.number}"]
    assert sorted(rule["threshold_percent"] for rule in budget["threshold_rules"]) == [0.5, 0.9, 1.0, 1.0]
    # The Billing Budgets API refuses user credentials (deploy.md's) without a project to bill the call to: 403
    assert budget["provider"] == "${google.budget}"
    [aliased] = [p for p in module.files["versions.tf"]["provider"] if p["google"].get("alias") == "budget"]
    assert (aliased["google"]["billing_project"], aliased["google"]["user_project_override"]) == (
        "${var.project_id}", True)


def test_the_notifiers_timeout_outlasts_one_events_deliveries(module):
    """An event tries its targets one after another (a job's and its queue's, 2 x MAX_TARGETS), each a secret
    read and one POST at most: the 60 s default cut a request of slow targets short, and the healthy ones
    after them heard nothing until a redelivery, or the dead letter."""
    import re

    from zen.adapters.secret_manager import CALL_TIMEOUT_S
    from zen.core.config import load_config
    from zen.core.notify import MAX_TARGETS

    default = re.search(r"timeout_s\s*=\s*optional\(number,\s*(\d+)\)", str(module.variables["notifier"]["type"]))
    assert default is not None
    per_target = CALL_TIMEOUT_S + load_config().notifications.timeout_s
    assert int(default.group(1)) >= 2 * MAX_TARGETS * per_target
