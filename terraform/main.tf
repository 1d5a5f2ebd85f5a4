# Zen on Google Cloud: shared locals, the APIs, and the artifacts terraform deploys (the functions'
# source archive and the agent wheel built by `make package`, in one bucket named after the project).
#
# Files by responsibility: pubsub.tf (topics, subscriptions, dead letters), sql.tf (Cloud SQL),
# functions.tf (the four gen2 functions and the scale-tick scheduler job), notifications.tf (the notifier,
# a fifth function, and its subscription), compute.tf (instance
# templates and regional MIGs per (cluster, region)), network.tf (private services access, VPC
# connector, Cloud NAT), iam.tf (service accounts and every binding), outputs.tf.

locals {
  package_dir = var.package_dir != null ? var.package_dir : "${path.module}/../dist"
  # Written by scripts/package.py: file names and their SHA-256 (see `make package`).
  manifest          = jsondecode(file("${local.package_dir}/manifest.json"))
  functions_archive = "${local.package_dir}/${local.manifest.functions_archive}"
  agent_wheel       = "${local.package_dir}/${local.manifest.agent_wheel}"

  # The Zen configuration the functions run with: the shipped file, or the package's default.
  zen_config_path    = var.zen_config_file != null ? var.zen_config_file : "${path.module}/../shared/zen/core/default_config.yaml"
  zen_config         = yamldecode(file(local.zen_config_path))
  zen_config_shipped = var.zen_config_file != null

  topic_defaults = {
    job_submitted = "zen-job-submitted"
    job_stop      = "zen-job-stop"
    heartbeats    = "zen-heartbeats"
    scale_tick    = "zen-scale-tick"
    job_start     = "zen-job-start"
    vm_control    = "zen-vm-control"
    job_events    = "zen-job-events"
  }
  topics            = merge(local.topic_defaults, try(local.zen_config.topics, {}))
  job_start_prefix  = try(local.zen_config.subscriptions.job_start_prefix, "zen-job-start-")
  vm_control_prefix = try(local.zen_config.subscriptions.vm_control_prefix, "zen-vm-control-")
  start_republish_s = try(local.zen_config.deadlines.start_republish_s, 3600)

  # Execution groups of each cluster in the Zen configuration (`tags`, and `region_tags` per region):
  # each instance template carries its region's as the instance attribute zen-tags, which the agent
  # reports in its heartbeats (a job with requires_tags only runs on a VM that has them).
  config_tags = {
    for c in local.zen_config.clusters : c.name => { tags = try(c.tags, []), region_tags = try(c.region_tags, {}) }
  }
  # Cluster -> region -> the tags its VMs carry there (ClusterConfig.tags_of), sorted and comma-joined: the
  # instance attribute zen-tags, and what decides which agent service account the region's VMs run as (iam.tf).
  cluster_region_tags = {
    for c in local.clusters : c.name => {
      for r in c.regions : r => join(",", sort(distinct(concat(
        try(local.config_tags[c.name].tags, []), try(local.config_tags[c.name].region_tags[r], []),
      ))))
    }
  }

  # Pull limits of each cluster in the Zen configuration (max_jobs_per_vm_day, max_gpu_hours_per_vm_day;
  # absent or null: none): each instance template carries them as the instance attributes
  # zen-max-jobs-per-day and zen-max-gpu-hours-per-day, empty for no limit (zen.agent.limits).
  config_pull_limits = {
    for c in local.zen_config.clusters : c.name => {
      jobs      = try(c.max_jobs_per_vm_day, null) == null ? "" : format("%d", c.max_jobs_per_vm_day)
      gpu_hours = try(c.max_gpu_hours_per_vm_day, null) == null ? "" : format("%g", c.max_gpu_hours_per_vm_day)
    }
  }

  # The jobs a VM of each cluster runs at once (max_jobs_per_vm; absent or null: 1), each on its own GPUs:
  # each instance template carries it as the instance attribute zen-max-jobs-per-vm (zen.agent.slots).
  config_jobs_per_vm = {
    for c in local.zen_config.clusters : c.name => format("%d", try(c.max_jobs_per_vm, null) == null ? 1 : c.max_jobs_per_vm)
  }

  # A flex-start VM's run duration (the cluster's flex_start_run_s; 7 days when absent).
  config_flex_start_run_s = { for c in local.zen_config.clusters : c.name => try(c.flex_start_run_s, 604800) }
  # Compact clusters (compact: true, docs/how-to/multi-node.md): each region's VMs in one zone, close together.
  config_compact = { for c in local.zen_config.clusters : c.name => try(c.compact, false) == true }
  # The machine types whose MIGs GCE places close together with a workload policy on the MIG, not a compact
  # placement policy in the template (A3 High of 8 GPUs, A3 Mega, A3 Ultra, A4): this provider (< 7.0) attaches
  # none to a regional MIG, so their compact pools get the one zone alone (zen.core.cluster_config.WORKLOAD_POLICY_TYPES).
  workload_policy_types = "^(a3-highgpu-8g|a3-megagpu-|a3-ultragpu-|a4-)"
  # Each model's GCE provisioning model, and a secondary pool's MIG suffix (zen.core.provisioning.MIG_SUFFIX).
  provisioning_models = { spot = "SPOT", standard = "STANDARD", "flex-start" = "FLEX_START" }
  mig_suffix          = { spot = "spot", standard = "std", "flex-start" = "flex" }

  # One entry per pool (cluster, region, model): its instance template and MIG. The primary model's pool
  # keeps the key and MIG name a cluster of one model always had (cluster/region, zen-<cluster>-<region>);
  # another model's is cluster/region/model, its MIG zen-<cluster>-<region>-<suffix>. The MIG name is
  # ClusterConfig.mig_name: the scheduler finds each MIG by it.
  mig_targets = merge([
    for cluster in local.clusters : merge([
      for i, model in local.cluster_provisioning[cluster.name] : {
        for region in cluster.regions : (i == 0 ? "${cluster.name}/${region}" : "${cluster.name}/${region}/${model}") => {
          cluster               = cluster.name
          region                = region
          model                 = model
          mig_name              = i == 0 ? "zen-${cluster.name}-${region}" : "zen-${cluster.name}-${region}-${local.mig_suffix[model]}"
          flex_start_run_s      = try(local.config_flex_start_run_s[cluster.name], 604800)
          compact               = try(local.config_compact[cluster.name], false)
          placement_policy      = try(local.config_compact[cluster.name], false) && length(regexall(local.workload_policy_types, cluster.machine_type)) == 0
          machine_type          = cluster.machine_type
          gpu_type              = cluster.gpu_type
          gpu_count             = cluster.gpu_count
          image                 = cluster.image != null ? cluster.image : var.default_image
          disk_size_gb          = cluster.boot_disk_size_gb
          zones                 = lookup(cluster.zones, region, [])
          subnetwork            = lookup(var.subnetworks, region, null)
          tags                  = local.cluster_region_tags[cluster.name][region]
          max_jobs_per_day      = try(local.config_pull_limits[cluster.name].jobs, "")
          max_gpu_hours_per_day = try(local.config_pull_limits[cluster.name].gpu_hours, "")
          max_jobs_per_vm       = try(local.config_jobs_per_vm[cluster.name], "1")
        }
      }
    ]...)
  ]...)
  # One start subscription per (cluster, region), whatever its models: the primary pool's entry (its key
  # cluster/region). Every model's agents of a region pull from it (the filter names no model).
  start_subscriptions = { for key, target in local.mig_targets : key => target if target.model == local.cluster_provisioning[target.cluster][0] }
  gpu_regions         = toset(distinct(flatten([for cluster in local.clusters : cluster.regions])))

  labels = merge({ app = "zen" }, var.labels)

  # Pub/Sub's own service agent: it moves messages to dead-letter topics and signs push requests.
  pubsub_service_agent = "service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}

data "google_project" "this" {
  project_id = var.project_id
}

resource "google_project_service" "apis" {
  for_each = toset([
    "artifactregistry.googleapis.com",
    "cloudbilling.googleapis.com",   # the Cloud Billing Catalog the scale tick reads prices from (zen.adapters.billing)
    "billingbudgets.googleapis.com", # the budget of budget.tf (with billing_account)
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "compute.googleapis.com",
    "eventarc.googleapis.com",
    "iam.googleapis.com",
    "iap.googleapis.com", # Identity-Aware Proxy in front of the web console (console.tf)
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "servicenetworking.googleapis.com",
    "serviceusage.googleapis.com",
    "sqladmin.googleapis.com",
    "storage.googleapis.com",
    "vpcaccess.googleapis.com",
  ])
  project = var.project_id
  service = each.value
  # Other workloads in the project may use these APIs too: destroying Zen must not turn them off.
  disable_on_destroy = false
}

# -- artifacts -----------------------------------------------------------------------------------

resource "google_storage_bucket" "artifacts" {
  name                        = "${var.project_id}-${var.name_prefix}-artifacts"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false
  labels                      = local.labels

  versioning {
    enabled = true
  }

  # Objects are named after their hash: no name gains a newer version, and an apply that ships new code deletes the
  # old zip and wheel, kept as noncurrent versions (to restore by hand for a rollback) for 30 days, then deleted.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 30
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

# Named after the archive's SHA-256: a code change is a new object, and the functions redeploy.
resource "google_storage_bucket_object" "functions_source" {
  name   = "functions/zen-functions-${filesha256(local.functions_archive)}.zip"
  bucket = google_storage_bucket.artifacts.name
  source = local.functions_archive

  lifecycle {
    precondition {
      condition     = filesha256(local.functions_archive) == local.manifest.functions_sha256
      error_message = "The functions archive does not match dist/manifest.json: run `make package` again."
    }
    precondition {
      condition     = local.manifest.config_sha256 == (local.zen_config_shipped ? filesha256(var.zen_config_file) : null)
      error_message = "The archive was packaged with a different configuration than zen_config_file: run `make package CONFIG=<zen_config_file>` (or without CONFIG when zen_config_file is unset)."
    }
  }
}

# The wheel keeps its PEP 427 file name (pip needs it) under a directory named after its hash.
resource "google_storage_bucket_object" "agent_wheel" {
  count  = var.agent_package == null ? 1 : 0
  name   = "agent/${filesha256(local.agent_wheel)}/${local.manifest.agent_wheel}"
  bucket = google_storage_bucket.artifacts.name
  source = local.agent_wheel
}

# The functions' build images live in a repository of their own, so the build service account can
# write there and nowhere else (instead of the project-wide gcf-artifacts default).
resource "google_artifact_registry_repository" "functions" {
  repository_id = "${var.name_prefix}-functions"
  location      = var.region
  format        = "DOCKER"
  description   = "Zen Cloud Functions build images"
  labels        = local.labels

  depends_on = [google_project_service.apis]
}
