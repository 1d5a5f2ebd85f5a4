"""Terraform for multi-node jobs (zen.core.gang): one firewall rule per cluster lets its VMs, and only
them, reach each other (source and target: the cluster's agent service accounts), for the rendezvous at
MASTER_PORT (the configuration's gangs.port range) and the collectives' connections after it."""

from __future__ import annotations

from tests.terraform.hcl import Module, block


def test_a_gangs_nodes_reach_each_other_and_nothing_else_reaches_them():
    module = Module.load()
    rule = module.resources_of("google_compute_firewall")["gang_rendezvous"]
    assert rule["for_each"] == "${local.cluster_agent_accounts}"
    assert rule["direction"] == "INGRESS"
    assert rule["source_service_accounts"] == rule["target_service_accounts"] == "${each.value}"
    assert "source_ranges" not in rule and "source_tags" not in rule  # no address range: identities only
    assert block(rule["allow"])["protocol"] == "tcp"
    accounts = module.locals["cluster_agent_accounts"]
    assert "local.agent_account_keys" in accounts and "google_service_account.agent[key].email" in accounts
    assert "local.zen_config.gangs.port" in module.locals["gang_port"]


def test_a_compact_cluster_gets_a_compact_placement_policy_and_single_zone_migs():
    """``compact: true`` (zen.core.cluster_config): per pool a resource policy with collocation COLLOCATED,
    named in the pool's instance template, and the MIG's target shape ANY_SINGLE_ZONE; other clusters get
    neither (the policy's for_each keeps the compact pools only)."""
    module = Module.load()
    policy = module.resources_of("google_compute_resource_policy")["compact"]
    assert "if target.compact" in policy["for_each"] and "local.mig_targets" in policy["for_each"]
    assert block(policy["group_placement_policy"])["collocation"] == "COLLOCATED"
    assert policy["region"] == "${each.value.region}"
    template = module.resources_of("google_compute_instance_template")["zen"]
    assert template["resource_policies"] == (
        "${each.value.compact ? [google_compute_resource_policy.compact[each.key].self_link] : null}")
    mig = module.resources_of("google_compute_region_instance_group_manager")["zen"]
    assert "each.value.compact" in mig["distribution_policy_target_shape"]
    assert "try(c.compact, false)" in module.locals["config_compact"]
