# The clusters terraform makes an instance template and a MIG for, per pool (main.tf: mig_targets): those
# of the Zen configuration the functions and agents read (local.zen_config: the shipped zen_config_file,
# or the package's default), so that the two cannot disagree. What only terraform needs per cluster (its
# image, boot disk size and zones) is var.cluster_settings, keyed by cluster name.
#
# Deprecated: var.clusters, a second list of the same clusters. Read only when given (its image, disk,
# zones, provisioning and spot), and then it must describe the same clusters as the configuration: a plan
# fails otherwise (clusters_match, a precondition on the MIGs).

locals {
  legacy_clusters = var.clusters == null ? {} : { for c in var.clusters : c.name => c }
  legacy_settings = {
    for name, c in local.legacy_clusters : name => { image = c.image, boot_disk_size_gb = c.boot_disk_size_gb, zones = c.zones }
  }
  cluster_settings = merge(local.legacy_settings, var.cluster_settings)

  clusters = [for c in local.zen_config.clusters : {
    name               = c.name
    gpu_type           = c.gpu_type
    gpu_count          = c.gpu_count
    machine_type       = try(c.machine_type, "a2-highgpu-1g")
    regions            = c.regions
    max_vms_per_region = c.max_vms_per_region
    max_vms            = c.max_vms
    min_vms            = try(c.min_vms, 0)
    image              = try(local.cluster_settings[c.name].image, null)
    boot_disk_size_gb  = try(local.cluster_settings[c.name].boot_disk_size_gb, 200)
    zones              = try(local.cluster_settings[c.name].zones, {})
    provisioning       = try(local.legacy_clusters[c.name].provisioning, null)
    spot               = try(local.legacy_clusters[c.name].spot, null)
  }]

  # A cluster's provisioning models (zen.core.provisioning), its primary first: its own `provisioning`,
  # else the Zen configuration's, else the deprecated `spot` bool (spot = true: ["spot"], false: ["standard"]).
  config_provisioning = { for c in local.zen_config.clusters : c.name => try(c.provisioning, null) }
  cluster_provisioning = {
    for c in local.clusters : c.name => (
      c.provisioning != null ? c.provisioning :
      try(local.config_provisioning[c.name], null) != null ? local.config_provisioning[c.name] :
      (c.spot != null ? c.spot : var.spot) ? ["spot"] : ["standard"]
    )
  }

  # var.clusters (when given) must describe the same clusters as the configuration the functions and agents
  # read: a MIG missing here would make the scheduler fail (MigNotFound), an extra one would never scale.
  clusters_from_variable = {
    for c in values(local.legacy_clusters) : c.name => {
      gpu_type           = c.gpu_type, gpu_count = c.gpu_count, machine_type = c.machine_type, regions = c.regions,
      max_vms_per_region = c.max_vms_per_region, max_vms = c.max_vms, min_vms = c.min_vms,
      provisioning       = local.cluster_provisioning[c.name]
    }
  }
  clusters_from_config = {
    for c in local.zen_config.clusters : c.name => {
      gpu_type = c.gpu_type, gpu_count = c.gpu_count, machine_type = try(c.machine_type, "a2-highgpu-1g"),
      regions  = c.regions, max_vms_per_region = c.max_vms_per_region, max_vms = c.max_vms,
      min_vms  = try(c.min_vms, 0),
      # A configuration that lists no provisioning has one model: any one model terraform gives its MIGs
      # (spot = true included) names them as it does; several models it must list itself.
      provisioning = (try(c.provisioning, null) != null ? c.provisioning :
      length(try(local.cluster_provisioning[c.name], [])) == 1 ? local.cluster_provisioning[c.name] : ["standard"])
    }
  }
  clusters_match = var.clusters == null ? true : jsonencode(local.clusters_from_variable) == jsonencode(local.clusters_from_config)
  # var.cluster_settings names only clusters of the configuration (a precondition on the MIGs).
  unknown_cluster_settings = setsubtract(keys(var.cluster_settings), [for c in local.zen_config.clusters : c.name])
}
