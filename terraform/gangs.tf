# Multi-node jobs (gangs: docs/how-to/multi-node.md): a gang's nodes meet at rank 0's MASTER_PORT, one of
# the configuration's gangs.port .. gangs.port + gangs.ports - 1, and talk to each other on their internal
# addresses (torchrun's rendezvous, then NCCL's own connections). One rule per cluster lets that cluster's
# VMs, and only them (source and target: the cluster's agent service accounts, iam.tf), reach each other
# on TCP; nothing from outside, nor from another cluster, is let in.
locals {
  gang_port  = try(local.zen_config.gangs.port, 29500)
  gang_ports = try(local.zen_config.gangs.ports, 1000)
  # Cluster -> the emails of the accounts its VMs run as (one per tag set of its regions).
  cluster_agent_accounts = { for cluster, keys_by_tags in local.agent_account_keys : cluster => sort(distinct([
    for key in values(keys_by_tags) : google_service_account.agent[key].email
  ])) }
}

resource "google_compute_firewall" "gang_rendezvous" {
  for_each    = local.cluster_agent_accounts
  name        = substr("${var.name_prefix}-gang-${each.key}", 0, 63)
  network     = local.network_id
  direction   = "INGRESS"
  priority    = 1000 # above the created network's deny-all (65534)
  description = "Zen gangs of cluster ${each.key}: rendezvous (MASTER_PORT ${local.gang_port}-${local.gang_port + local.gang_ports - 1}) and the collectives' connections between the cluster's own VMs"

  source_service_accounts = each.value
  target_service_accounts = each.value

  allow {
    protocol = "tcp" # the rendezvous port and the ephemeral ports NCCL and gloo open between the nodes
  }
}
