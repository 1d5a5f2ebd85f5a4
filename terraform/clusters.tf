# The clusters terraform makes an instance template and a MIG for, per pool (main.tf: mig_targets): those
# of the Zen configuration the functions and agents read (local.zen_config: the shipped zen_config_file,
# or the package's default), so that the two cannot disagree. What only terraform needs per cluster (its
# image, boot disk size and zones) is var.cluster_settings, keyed by cluster name.
#
# Deprecated: var.clusters, a second list of the same clusters. Read only when given (its image, disk,
# zones, provisioning and spot), and then it must describe the same clusters as the configuration: a plan
# fails otherwise (clusters_match and provisioning_conflicts, preconditions on the MIGs).

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

  # A cluster's provisioning models (zen.core.provisioning), its primary first: the Zen configuration's, as
  # the functions read it (a cluster that lists none is ["standard"], ClusterConfig.provisioning's default).
  # Terraform builds exactly these, so that Zen prices and places each VM as the model it is.
  cluster_provisioning = {
    for c in local.zen_config.clusters : c.name => try(c.provisioning, null) != null ? c.provisioning : ["standard"]
  }
  # What the deprecated settings ask for, null where they say nothing: a cluster's own provisioning in
  # var.clusters, else (for a cluster the configuration lists no provisioning for) its spot there or var.spot.
  # One that differs from the configuration's fails the plan (a precondition on the MIGs): spot = true beside
  # a configuration that lists no provisioning made spot VMs that Zen priced and placed as standard ones.
  config_lists_provisioning = { for c in local.zen_config.clusters : c.name => try(c.provisioning, null) != null }
  legacy_provisioning = {
    for c in local.clusters : c.name => (
      c.provisioning != null ? c.provisioning :
      local.config_lists_provisioning[c.name] ? null :
      c.spot != null ? (c.spot ? ["spot"] : ["standard"]) :
      var.spot != null ? (var.spot ? ["spot"] : ["standard"]) : null
    )
  }
  provisioning_conflicts = [
    for name, models in local.legacy_provisioning : "${name} (${jsonencode(models)} against the configuration's ${jsonencode(local.cluster_provisioning[name])})"
    if models != null && jsonencode(models) != jsonencode(local.cluster_provisioning[name])
  ]

  # var.clusters (when given) must describe the same clusters as the configuration the functions and agents
  # read: a MIG missing here would make the scheduler fail (MigNotFound), an extra one would never scale.
  clusters_from_variable = {
    for c in values(local.legacy_clusters) : c.name => {
      gpu_type           = c.gpu_type, gpu_count = c.gpu_count, machine_type = c.machine_type, regions = c.regions,
      max_vms_per_region = c.max_vms_per_region, max_vms = c.max_vms, min_vms = c.min_vms
    }
  }
  clusters_from_config = {
    for c in local.zen_config.clusters : c.name => {
      gpu_type = c.gpu_type, gpu_count = c.gpu_count, machine_type = try(c.machine_type, "a2-highgpu-1g"),
      regions  = c.regions, max_vms_per_region = c.max_vms_per_region, max_vms = c.max_vms,
      min_vms  = try(c.min_vms, 0)
    }
  }
  clusters_match = var.clusters == null ? true : jsonencode(local.clusters_from_variable) == jsonencode(local.clusters_from_config)
  # var.cluster_settings names only clusters of the configuration (a precondition on the MIGs).
  unknown_cluster_settings = setsubtract(keys(var.cluster_settings), [for c in local.zen_config.clusters : c.name])
  # A cluster's zones are given per region it runs in, each zone of that region and listed once (a precondition on
  # the MIGs). A region the cluster does not run in (a typo) was dropped unread: the MIG spanned every zone of the
  # region, those without the cluster's GPU too; a zone of another region, or one listed twice, was refused by GCE
  # in the middle of an apply.
  zone_problems = flatten([for c in local.clusters : [for region, zones in c.zones : concat(
    contains(c.regions, region) ? [] : ["${c.name}: zones of ${region}, which is not one of its regions (${join(", ", c.regions)})"],
    [for z in distinct(zones) : "${c.name}: zone ${z} is not in region ${region}" if contains(c.regions, region) && !can(regex("^${region}-[a-z0-9]+$", z))],
    length(distinct(zones)) == length(zones) ? [] : ["${c.name}: a zone of ${region} is listed twice"],
  )]])
}
