"""Terraform for provisioning models (issue 33): an instance template and a regional MIG per pool
(cluster, region, model), each template's scheduling as GCE documents its model (spot: SPOT, deleted on
preemption; standard: STANDARD; flex-start: FLEX_START with a max run duration, deleted at its end),
flex-start MIGs fit for resize requests, a cluster's `provisioning` list in place of the `spot` bool
(which still works), and the functions' role covering resize requests."""

from __future__ import annotations

import re

from tests.terraform.hcl import Module, block
from zen.core.provisioning import MIG_SUFFIX, MODELS


def test_each_model_maps_to_its_gce_provisioning_model_and_suffix():
    module = Module.load()
    assert module.locals["provisioning_models"] == {"spot": "SPOT", "standard": "STANDARD", "flex-start": "FLEX_START"}
    assert set(module.locals["provisioning_models"]) == set(MODELS)
    assert module.locals["mig_suffix"] == MIG_SUFFIX


def test_the_template_schedules_each_model_as_gce_documents_it():
    template = Module.load().resources_of("google_compute_instance_template")["zen"]
    scheduling = block(template["scheduling"])
    assert scheduling["provisioning_model"] == "${local.provisioning_models[each.value.model]}"
    assert scheduling["preemptible"] == '${each.value.model == "spot"}'
    assert scheduling["automatic_restart"] == '${each.value.model == "standard"}'
    # Spot and flex-start VMs are deleted (on preemption, at the end of their run); standard ones have none.
    assert scheduling["instance_termination_action"] == '${each.value.model == "standard" ? null : "DELETE"}'
    [duration] = scheduling["dynamic"]
    assert set(duration) == {"max_run_duration"}
    assert duration["max_run_duration"]["for_each"] == \
        '${each.value.model == "flex-start" ? [each.value.flex_start_run_s] : []}'
    assert block(duration["max_run_duration"]["content"])["seconds"] == "${max_run_duration.value}"
    assert template["name_prefix"] == "${each.value.mig_name}-"  # the primary's as before: no replacement


def test_a_flex_start_template_consumes_no_reservation():
    template = Module.load().resources_of("google_compute_instance_template")["zen"]
    [affinity] = [d["reservation_affinity"] for d in template["dynamic"] if "reservation_affinity" in d]
    assert affinity["for_each"] == '${each.value.model == "flex-start" ? [1] : []}'
    assert block(affinity["content"])["type"] == "NO_RESERVATION"


def test_flex_start_migs_take_resize_requests():
    mig = Module.load().resources_of("google_compute_region_instance_group_manager")["zen"]
    assert mig["distribution_policy_target_shape"] == (  # a compact cluster's too (test_terraform_gangs.py)
        '${each.value.model == "flex-start" || each.value.compact ? "ANY_SINGLE_ZONE" : "ANY"}')
    policy = block(mig["instance_lifecycle_policy"])  # every MIG's (test_terraform_recreated_vms.py)
    assert policy["default_action_on_failure"] == '${each.value.model == "flex-start" ? "DO_NOTHING" : "REPAIR"}'


def test_a_clusters_provisioning_replaces_spot_which_still_works():
    module = Module.load()
    fields = module.variables["clusters"]["type"]
    assert "provisioning" in fields and "spot" in fields
    # the Zen configuration's models (none listed: [standard]); the deprecated settings only checked against them
    assert "c.provisioning : [\"standard\"]" in module.locals["cluster_provisioning"]
    legacy = module.locals["legacy_provisioning"]
    order = [legacy.index(s) for s in ("c.provisioning != null", "config_lists_provisioning", "c.spot != null",
                                       "var.spot != null")]
    assert order == sorted(order)
    assert "Deprecated" in module.variables["spot"]["description"]
    # One entry per pool: the primary keeps its key (cluster/region) and MIG name; others add the model.
    targets = module.locals["mig_targets"]
    assert re.search(r'i == 0 \? "\$\{cluster\.name\}/\$\{region\}" : "\$\{cluster\.name\}/\$\{region\}/\$\{model\}"',
                     targets), targets
    # A deprecated setting that says otherwise fails the plan.
    [rule] = [p for p in module.resources_of("google_compute_region_instance_group_manager")["zen"]["lifecycle"][0][
        "precondition"] if "provisioning_conflicts" in p["condition"]]
    assert "provisioning: [spot]" in rule["error_message"]


def test_a_provisioning_list_is_validated():
    validations = Module.load().variables["clusters"]["validation"]
    rule = next(v for v in validations if "provisioning" in v["condition"])
    assert '"spot", "standard", "flex-start"' in rule["condition"] and "distinct" in rule["condition"]


def test_the_functions_role_covers_resize_requests():
    role = Module.load().resources_of("google_project_iam_custom_role")["mig_scaler"]
    assert set(role["permissions"]) == {"compute.instanceGroupManagers.get", "compute.instanceGroupManagers.update"}
    assert "resize requests" in role["description"]
