# GPU capacity: per pool (cluster, region, provisioning model; main.tf's mig_targets) an instance template
# and a regional MIG that Zen resizes (a flex-start MIG: by resize requests, zen.adapters.flex_start).
#
# The MIGs start at target size 0 and terraform never touches their size again (ignore_changes):
# the scheduler (shared/zen/scaling) sets it, deletes idle instances by name, and reads
# listManagedInstances / listErrors. Hence no autoscaler, and no autohealing health check that
# would recreate VMs the scheduler is draining.

locals {
  # What startup.sh installs: the wheel uploaded from dist/, unless a package is given.
  agent_package = (var.agent_package != null ? var.agent_package :
  "gs://${google_storage_bucket.artifacts.name}/${google_storage_bucket_object.agent_wheel[0].name}")
  # Where startup.sh sends the VM's first word (zen.core.vm_heartbeat.VmUp).
  heartbeats_topic_id = "projects/${var.project_id}/topics/${local.topics["heartbeats"]}"
}

# A compact cluster's pools (compact: true): a compact placement policy per pool (GCE places the VMs that
# share it close together in one zone, for a gang's collectives), named by its instance template; the MIG's
# target shape ANY_SINGLE_ZONE keeps every VM of the region in that zone. Not for the machine types GCE places
# with a workload policy on the MIG instead (local.workload_policy_types): their pools get the zone alone.
resource "google_compute_resource_policy" "compact" {
  for_each = { for key, target in local.mig_targets : key => target if target.placement_policy }
  name     = "${each.value.mig_name}-compact"
  region   = each.value.region

  group_placement_policy {
    collocation = "COLLOCATED"
  }

  depends_on = [google_project_service.apis]
}

resource "google_compute_instance_template" "zen" {
  for_each     = local.mig_targets
  name_prefix  = "${each.value.mig_name}-"
  region       = each.value.region
  machine_type = each.value.machine_type
  description  = "Zen ${each.value.cluster} ${each.value.model} GPU VM in ${each.value.region}"
  labels       = merge(local.labels, { zen-cluster = each.value.cluster })

  disk {
    source_image = each.value.image
    disk_size_gb = each.value.disk_size_gb
    disk_type    = "pd-balanced"
    boot         = true
    auto_delete  = true
  }

  # A2/G2 machine types come with their GPUs; naming them keeps the template explicit and lets N1
  # shapes work too. They must match the machine type.
  guest_accelerator {
    type  = each.value.gpu_type
    count = each.value.gpu_count
  }

  network_interface {
    network    = each.value.subnetwork == null ? local.network_id : null
    subnetwork = each.value.subnetwork
    dynamic "access_config" {
      for_each = var.agent_external_ip ? [1] : []
      content {}
    }
  }

  # GPU VMs cannot live-migrate. Spot VMs are deleted on preemption (the agent reports PREEMPTED
  # and Zen reruns the job); the MIG then recreates the instance, which Zen counts as booting
  # supply or deletes when no longer needed. Flex-start VMs (Dynamic Workload Scheduler) come from
  # the MIG's resize requests and are deleted when their run duration (the cluster's
  # flex_start_run_s, which each resize request asks for too) is over. Standard VMs restart.
  scheduling {
    on_host_maintenance         = "TERMINATE"
    automatic_restart           = each.value.model == "standard"
    preemptible                 = each.value.model == "spot"
    provisioning_model          = local.provisioning_models[each.value.model]
    instance_termination_action = each.value.model == "standard" ? null : "DELETE"

    dynamic "max_run_duration" {
      for_each = each.value.model == "flex-start" ? [each.value.flex_start_run_s] : []
      content {
        seconds = max_run_duration.value
      }
    }
  }

  # Flex-start VMs consume no reservation: their template says so, as Compute's flex-start examples do (a
  # template's default, ANY_RESERVATION, is a standard VM's).
  dynamic "reservation_affinity" {
    for_each = each.value.model == "flex-start" ? [1] : []
    content {
      type = "NO_RESERVATION"
    }
  }

  # Its cluster's account for its region's tags (iam.tf): IAM tells clusters apart, and a cluster's regions
  # with different tags.
  service_account {
    email  = google_service_account.agent[local.agent_account_of[each.value.cluster][each.value.region]].email
    scopes = ["cloud-platform"] # access is decided by the service account's IAM roles alone
  }

  shielded_instance_config {
    enable_secure_boot          = var.secure_boot
    enable_vtpm                 = true
    enable_integrity_monitoring = true
  }

  resource_policies = each.value.placement_policy ? [google_compute_resource_policy.compact[each.key].self_link] : null

  metadata_startup_script = file("${path.module}/../shared/zen/agent/startup.sh")
  metadata = merge(
    {
      zen-cluster            = each.value.cluster
      zen-tags               = each.value.tags # comma-separated execution groups, maybe empty
      zen-agent-package      = local.agent_package
      enable-oslogin         = "TRUE"
      block-project-ssh-keys = "true"
      serial-port-enable     = "false"
      # pull limits (zen.agent.limits): jobs / GPU-hours per VM per 24 h, empty for no limit
      zen-max-jobs-per-day      = each.value.max_jobs_per_day
      zen-max-gpu-hours-per-day = each.value.max_gpu_hours_per_day
      # several jobs per VM (zen.agent.slots): the VM's GPUs, and the jobs it runs at once, each on its own
      zen-gpu-count       = tostring(each.value.gpu_count)
      zen-max-jobs-per-vm = each.value.max_jobs_per_vm
      # whether the functions require each heartbeat's identity token (zen.adapters.vm_proof): off, the agent
      # sends a heartbeat without one rather than lose it (tostring: a bare var.vm_proof here makes
      # checkov's evaluator lose this map, and with it block-project-ssh-keys: CKV_GCP_32)
      zen-vm-proof = tostring(var.vm_proof)
      # where startup.sh sends the VM's first word (zen.core.vm_heartbeat.VmUp) before the agent is installed
      zen-heartbeats-topic = tostring(local.heartbeats_topic_id)
      # the locations of the job image repositories, a JSON list (startup.sh sets docker's credentials
      # for <location>-docker.pkg.dev): a regional repository is reached only through its region's host,
      # from VMs of any region (jsonencode: checkov's evaluator loses this map with a join or a for)
      zen-image-locations = jsonencode(distinct(var.agent_image_repositories[*].location))
      # the agent's tunables, a JSON object of ZEN_AGENT_* name -> value (startup.sh writes them into its unit)
      zen-agent-env = jsonencode(var.agent_env)
    },
    local.zen_config_shipped ? { zen-config = file(var.zen_config_file) } : {},
  )

  lifecycle {
    create_before_destroy = true
  }
}

resource "google_compute_region_instance_group_manager" "zen" {
  for_each = local.mig_targets
  name     = each.value.mig_name
  region   = each.value.region
  # VMs are named <base>-xxxx (4 random characters per MIG): the region in the base keeps names unique
  # across a cluster's regions, which Zen needs (its rows, drains and control subscriptions are by name).
  # The provider replaces a MIG whose base changes (deleting its VMs, jobs and all): a MIG created
  # before keeps its base (ignore_changes below) until it is drained and recreated.
  base_instance_name = each.value.mig_name
  description        = "Zen ${each.value.cluster} ${each.value.model} VMs in ${each.value.region}; sized by the Zen scheduler"

  version {
    name              = "primary"
    instance_template = google_compute_instance_template.zen[each.key].id
  }

  target_size        = 0
  wait_for_instances = false

  # Batch: single-VM jobs, any zone with capacity will do. ANY lets the MIG put each new VM
  # wherever the GPUs are (and retry elsewhere on a zonal stockout) instead of balancing zones.
  # A flex-start MIG's resize requests are granted all at once in one zone (ANY_SINGLE_ZONE), and a VM
  # that fails to be created is left to the request rather than recreated (DO_NOTHING), as GCE asks of
  # MIGs that take resize requests.
  # A compact cluster's MIGs too (ANY_SINGLE_ZONE: every VM in the zone GCE picks for the first).
  distribution_policy_target_shape = each.value.model == "flex-start" || each.value.compact ? "ANY_SINGLE_ZONE" : "ANY"
  # The zones are fixed when the MIG is made: the provider replaces a MIG whose zones change (GCE cannot change
  # them), deleting its VMs and the jobs they run, so an existing MIG keeps its zones (ignore_changes below) until
  # its jobs end and it is replaced (docs/how-to/operate.md, Changing a cluster).
  distribution_policy_zones = length(each.value.zones) > 0 ? each.value.zones : null

  # A VM its MIG recreates (a spot VM deleted at its preemption, any VM GCE deleted or stopped) boots from the MIG's
  # template now (force_update_on_repair): GCE's default recreates it from the template it was first created from,
  # so after an apply a preempted VM of the release before came back with that release's agent, configuration, tags
  # and account (from the template the same apply deletes), for as long as its name lived, and after a
  # cluster's models were reordered a spot VM came back spot where Zen takes it as its template's model now
  # (zen.jobs.claims). A flex-start MIG repairs nothing (its resize request owns its VMs).
  instance_lifecycle_policy {
    force_update_on_repair    = "YES"
    default_action_on_failure = each.value.model == "flex-start" ? "DO_NOTHING" : "REPAIR"
  }

  # A new template must never replace a VM that is running a job: OPPORTUNISTIC applies it only to
  # VMs created (or recreated: instance_lifecycle_policy) later, and nothing is moved between zones
  # (required with target shape ANY).
  update_policy {
    type                         = "OPPORTUNISTIC"
    minimal_action               = "REPLACE"
    instance_redistribution_type = "NONE"
  }

  # Functions before agents: a VM created from a new template runs the new agent, whose reports may carry fields
  # the functions of the release before refuse (unknown fields are refused: docs/reference/messages.md), so the
  # MIG takes the new template only once every function of the same apply is deployed.
  depends_on = [google_cloudfunctions2_function.zen]

  lifecycle {
    ignore_changes = [target_size, base_instance_name, distribution_policy_zones]

    precondition {
      condition     = local.clusters_match
      error_message = "var.clusters (deprecated: leave it unset, the clusters are read from the Zen configuration) differs from the clusters of the Zen configuration (${local.zen_config_path}): names, regions, machine and GPU fields and VM limits must be the same."
    }
    precondition {
      condition     = length(local.provisioning_conflicts) == 0
      error_message = "The deprecated spot variable or var.clusters asks for other provisioning models than the Zen configuration (${local.zen_config_path}) lists for: ${join("; ", local.provisioning_conflicts)}. Zen prices and places each VM as the configuration's model (a cluster that lists none is [\"standard\"]): write the models in the cluster's provisioning there (e.g. provisioning: [spot]) and leave spot unset."
    }
    precondition {
      condition     = length(local.unknown_cluster_settings) == 0
      error_message = "cluster_settings names clusters the Zen configuration (${local.zen_config_path}) does not have: ${join(", ", local.unknown_cluster_settings)}."
    }
    precondition {
      condition     = length(local.zone_problems) == 0
      error_message = "cluster_settings zones (per region of the cluster, each zone of that region, once): ${join("; ", local.zone_problems)}."
    }
  }
}
