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
