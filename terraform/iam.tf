# Identities and permissions. Each principal gets only what it uses, bound on the resource itself
# wherever the API allows it (topic, subscription, bucket, repository, Cloud Run service, service
# account); the few project-level bindings say why no narrower one exists and carry an IAM
# condition where the service honours one (Compute, Cloud SQL, Cloud Storage).
#
# | principal                  | what it does                                  | bindings                     |
# | -------------------------- | --------------------------------------------- | ---------------------------- |
# | zen-fn-<fn> (x4)           | runs one function; is its trigger's identity  | publisher on job-start,      |
# |                            |                                               | vm-control, job-events;      |
# |                            |                                               | run.invoker on its service;  |
# |                            |                                               | SQL client + instance user   |
# | zen-fn-submit, -heartbeat, | also scale the MIGs (a heartbeat: when its VM | MIG scaler (custom, zen-*),  |
# | zen-fn-tick                | became usable)                                | Compute reader               |
# | zen-fn-<fn> (x4)           | locate jobs' input buckets (data locality)    | bucket locator (custom) on   |
# |                            |                                               | each agent_input_buckets     |
# | zen-fn-tick                | makes each VM's control subscription, grants  | subscription maker (custom), |
# |                            | it to the account its VM runs as              | attach on vm-control         |
# | zen-fn-tick                | probes the heartbeat path                     | publisher on heartbeats      |
# | zen-ag-<cluster>[-<hash>]  | the GPU VMs of one cluster's regions that     | see "agent" below            |
# | (x each tag set)           | carry one tag set                             |                              |
# | zen-fn-build               | builds the functions                          | source objects (ours and the |
# |                            |                                               | gcf-v2-sources copy), image  |
# |                            |                                               | repo                         |
# | Pub/Sub service agent      | dead-letters, signs Eventarc pushes           | publisher on dead letters    |
# | var.submitters (people)    | submit and stop jobs                          | publisher on job-submitted,  |
# |                            |                                               | job-stop                     |

resource "google_service_account" "function" {
  for_each     = local.functions
  account_id   = "${var.name_prefix}-fn-${each.value.account}"
  display_name = "Zen function ${each.key}"
  description  = "Runs the Zen Cloud Function ${each.key} and is the identity of its Eventarc trigger."

  depends_on = [google_project_service.apis]
}

# One account per (cluster, tag set): IAM then tells one cluster's VMs from another's (start subscriptions,
# control subscriptions), and a cluster's regions that carry different tags (region_tags) from each other, so
# a bucket with bound data (data clearance, below) reaches only the regions cleared for it. account_id: 6-30
# characters; a long cluster name is replaced by a digest of it. A cluster's regions with equal tag sets share
# an account. The cluster's own account (agent_clusters, key: the cluster's name) serves its regions that carry
# only its cluster-wide tags, or all its regions when they carry one tag set (a cluster without region_tags:
# the one account it always had); each other tag set gets an account of its own, key and id suffixed with a
# digest of the cluster and the tag set (stable while both are).
locals {
  agent_clusters = { for c in local.clusters : c.name => (
    length("${var.name_prefix}-ag-${c.name}") <= 30 ? "${var.name_prefix}-ag-${c.name}" : "${var.name_prefix}-ag-${substr(sha1(c.name), 0, 12)}"
  ) }
  agent_cluster_tag_sets = { for cluster, regions in local.cluster_region_tags : cluster => distinct(values(regions)) }
  # Cluster -> tag set (zen-tags) -> the key of its account in google_service_account.agent.
  agent_account_keys = { for cluster, tag_sets in local.agent_cluster_tag_sets : cluster => {
    for tags in tag_sets : tags => (
      length(tag_sets) == 1 || tags == join(",", sort(distinct(try(local.config_tags[cluster].tags, [])))) ? cluster :
      "${cluster}/${substr(sha1("${cluster}:${tags}"), 0, 6)}"
    )
  } }
  # Account key -> its cluster, the tags its VMs carry, and its account_id (the suffix after 23 characters at most).
  agent_accounts = merge([for cluster, keys_by_tags in local.agent_account_keys : {
    for tags, key in keys_by_tags : key => {
      cluster    = cluster
      tags       = compact(split(",", tags))
      account_id = key == cluster ? local.agent_clusters[cluster] : "${substr(local.agent_clusters[cluster], 0, 23)}-${substr(sha1("${cluster}:${tags}"), 0, 6)}"
    }
  }]...)
  # Cluster -> region -> the key of the account its VMs run as.
  agent_account_of = { for cluster, regions in local.cluster_region_tags : cluster => {
    for region, tags in regions : region => local.agent_account_keys[cluster][tags]
  } }
}

# The names a cluster's own account always had; another's adds its tags, cut to IAM's limits (100, 256).
resource "google_service_account" "agent" {
  for_each     = local.agent_accounts
  account_id   = each.value.account_id
  display_name = each.key == each.value.cluster ? "Zen VM agent, cluster ${each.key}" : substr("Zen VM agent, cluster ${each.value.cluster}, tags ${join(",", each.value.tags)}", 0, 100)
  description  = substr("Identity of the Zen GPU VMs of cluster ${each.value.cluster}${each.key == each.value.cluster ? "" : " in its regions tagged ${join(",", each.value.tags)}"}: pulls its start messages, heartbeats, reads the control subscriptions Zen grants it.", 0, 256)

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "build" {
  account_id   = "${var.name_prefix}-fn-build"
  display_name = "Zen function builds"
  description  = "Cloud Build identity for the Zen functions: reads their source, writes their image, writes build logs."

  depends_on = [google_project_service.apis]
}

# -- functions: Pub/Sub --------------------------------------------------------------------------

locals {
  # Every function commits through the outbox and relays it after commit (and the tick resends
  # what is left), so each may publish start messages, control messages and job events.
  function_publishes = ["job_start", "vm_control", "job_events"]
  function_topic_pairs = {
    for pair in setproduct(keys(local.functions), local.function_publishes) : "${pair[0]}/${pair[1]}" => {
      function = pair[0]
      topic    = pair[1]
    }
  }
  scaling_functions = { for name, f in local.functions : name => f if f.scaling }
}

resource "google_pubsub_topic_iam_member" "function_publisher" {
  for_each = local.function_topic_pairs
  topic    = google_pubsub_topic.zen[each.value.topic].name
  role     = "roles/pubsub.publisher"
  member   = "serviceAccount:${google_service_account.function[each.value.function].email}"
}

# The tick probes the heartbeat path (zen.jobs.probes): each tick publishes one message on zen-heartbeats, which
# the heartbeat function hears like any report; a probe that does not come through in time holds the lost-job
# sweep (reports Pub/Sub accepted, which keep their agent's fence up, wait undelivered).
resource "google_pubsub_topic_iam_member" "tick_probe_publisher" {
  topic  = google_pubsub_topic.zen["heartbeats"].name
  role   = "roles/pubsub.publisher"
  member = "serviceAccount:${google_service_account.function["on_scale_tick"].email}"
}

# The trigger pushes to the function's Cloud Run service as the function's own service account.
# Pub/Sub direct events need no roles/eventarc.eventReceiver.
resource "google_cloud_run_service_iam_member" "trigger_invoker" {
  for_each = local.functions
  location = var.region
  service  = google_cloudfunctions2_function.zen[each.key].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.function[each.key].email}"
}

# Only projects whose Pub/Sub service agent predates 8 April 2021 need this, to sign push requests.
resource "google_service_account_iam_member" "pubsub_token_creator" {
  for_each           = var.grant_pubsub_token_creator ? local.functions : {}
  service_account_id = google_service_account.function[each.key].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${local.pubsub_service_agent}"
}

resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  for_each = local.dead_lettered
  topic    = google_pubsub_topic.dead_letter[each.key].name
  role     = "roles/pubsub.publisher"
  member   = "serviceAccount:${local.pubsub_service_agent}"
}

# -- people: submitting and stopping jobs --------------------------------------------------------
# `zen submit` and `zen stop` publish on zen-job-submitted and zen-job-stop: var.submitters get
# Publisher on those two topics and nothing else. The other topics are the system's own: a publisher
# on zen-heartbeats or zen-vm-control could report jobs finished, or order VMs to stop them.

locals {
  submitter_topics = ["job_submitted", "job_stop"]
  submitter_bindings = {
    for pair in setproduct(local.submitter_topics, var.submitters) : "${pair[0]}/${pair[1]}" => {
      topic  = pair[0]
      member = pair[1]
    }
  }
}

resource "google_pubsub_topic_iam_member" "submitters" {
  for_each = local.submitter_bindings
  topic    = google_pubsub_topic.zen[each.value.topic].name
  role     = "roles/pubsub.publisher"
  member   = each.value.member
}

# -- functions: Cloud SQL ------------------------------------------------------------------------
# Cloud SQL has no instance-level IAM policy: the roles are granted on the project, with a condition
# that limits them to this one instance (sqladmin honours resource.name in IAM conditions).

locals {
  sql_condition = "resource.service == \"sqladmin.googleapis.com\" && resource.name == \"projects/${var.project_id}/instances/${google_sql_database_instance.zen.name}\""
  sql_principals = merge(
    { for name, sa in google_service_account.function : "fn/${name}" => "serviceAccount:${sa.email}" },
    { for email in var.db_admin_users : "user/${email}" => "user:${email}" },
    { for email in setsubtract(toset(var.db_reader_users), toset(var.db_admin_users)) : "reader/${email}" => "user:${email}" },
  )
  sql_bindings = {
    for pair in setproduct(keys(local.sql_principals), ["roles/cloudsql.client", "roles/cloudsql.instanceUser"]) :
    "${pair[0]}/${pair[1]}" => { member = local.sql_principals[pair[0]], role = pair[1] }
  }
}

resource "google_project_iam_member" "sql" {
  for_each = local.sql_bindings
  project  = var.project_id
  role     = each.value.role
  member   = each.value.member

  condition {
    title       = "zen-sql-instance-only"
    description = "Only the Zen Cloud SQL instance"
    expression  = local.sql_condition
  }
}

# -- functions: Compute (the scheduler) ----------------------------------------------------------
# zen.adapters.compute calls instanceGroupManagers get, resize, listManagedInstances, listErrors and
# deleteInstances (and list: see compute_lister below) (get -> compute.instanceGroupManagers.get, the rest ->
# compute.instanceGroupManagers.update) and regionOperations get, wait and list (compute.regionOperations.get,
# .list: a resize first waits for its MIG's writes in flight, which the target size does not show yet); for a
# flex-start pool, zen.adapters.flex_start lists, inserts and cancels the MIG's resize requests
# (regionInstanceGroupManagerResizeRequests), which Compute authorizes on the MIG itself with the same two
# permissions (list: get; insert, cancel: update), so the same role and condition cover them.
# roles/compute.instanceAdmin.v1 would also let it create VMs, templates and disks anywhere.
# Compute has no IAM policy on MIGs, so the custom role is bound on the project with a condition
# limiting it to MIGs named zen-* (the names ZenConfig.mig_name gives them).

resource "google_project_iam_custom_role" "mig_scaler" {
  role_id     = "${replace(var.name_prefix, "-", "_")}MigScaler"
  title       = "Zen MIG scaler"
  description = "Read and resize the Zen regional MIGs (flex-start ones by resize requests) and delete their instances."
  permissions = ["compute.instanceGroupManagers.get", "compute.instanceGroupManagers.update"]

  depends_on = [google_project_service.apis]
}

# Two reads that no condition on a MIG's name can cover, granted on the project: operations have
# generated names and no IAM of their own (reading their status reveals only the progress of
# operations: every scaling function, whose writes look at their operation once, and whose resizes list
# the region's operations not DONE to find their MIG's writes in flight), and the tick lists
# each region's MIGs once (instanceGroupManagers.list: every MIG's target size and stability in one
# call; a call on the region, not on one MIG: the tick's alone, as no other function lists). Both read
# metadata and change nothing. Without the list permission the scheduler falls back to one get per MIG.
resource "google_project_iam_custom_role" "compute_reader" {
  role_id     = "${replace(var.name_prefix, "-", "_")}ComputeReader"
  title       = "Zen Compute reader"
  description = "Read and list regional Compute operations."
  permissions = ["compute.regionOperations.get", "compute.regionOperations.list"]

  depends_on = [google_project_service.apis]
}

resource "google_project_iam_custom_role" "compute_lister" {
  role_id     = "${replace(var.name_prefix, "-", "_")}ComputeLister"
  title       = "Zen Compute lister"
  description = "List the regional MIGs (the scale tick's one read per region)."
  permissions = ["compute.instanceGroupManagers.list"]

  depends_on = [google_project_service.apis]
}

resource "google_project_iam_member" "mig_scaler" {
  for_each = local.scaling_functions
  project  = var.project_id
  role     = google_project_iam_custom_role.mig_scaler.id
  member   = "serviceAccount:${google_service_account.function[each.key].email}"

  condition {
    title       = "zen-migs-only"
    description = "Only the regional MIGs named zen-*"
    # By name only: whether Compute reports a regional MIG as compute.googleapis.com/InstanceGroupManager
    # or as a RegionInstanceGroupManager in resource.type is not documented with certainty, and a
    # wrong type would deny every call. The name alone (a regional MIG's name, zen-*) is the limit.
    expression = "resource.name.startsWith(\"projects/${var.project_id}/regions/\") && resource.name.extract(\"/instanceGroupManagers/{name}\").startsWith(\"zen-\")"
  }
}

resource "google_project_iam_member" "compute_reader" {
  for_each = local.scaling_functions
  project  = var.project_id
  role     = google_project_iam_custom_role.compute_reader.id
  member   = "serviceAccount:${google_service_account.function[each.key].email}"
}

resource "google_project_iam_member" "compute_lister" {
  project = var.project_id
  role    = google_project_iam_custom_role.compute_lister.id
  member  = "serviceAccount:${google_service_account.function["on_scale_tick"].email}"
}

# The tick reads the GPU quotas (zen.adapters.quotas: regions.get for a region's, projects.get for
# GPUS_ALL_REGIONS), at most once per region a minute, so that a region whose quota leaves no room for a
# VM is passed over without asking for one (docs/how-to/deploy.md#gpu-quotas). Both read metadata only.
resource "google_project_iam_custom_role" "quota_reader" {
  role_id     = "${replace(var.name_prefix, "-", "_")}QuotaReader"
  title       = "Zen GPU quota reader"
  description = "Read the regions' and the project's Compute quotas (the scale tick)."
  permissions = ["compute.projects.get", "compute.regions.get"]

  depends_on = [google_project_service.apis]
}

resource "google_project_iam_member" "quota_reader" {
  project = var.project_id
  role    = google_project_iam_custom_role.quota_reader.id
  member  = "serviceAccount:${google_service_account.function["on_scale_tick"].email}"
}

# -- functions: Cloud Storage (data locality) ----------------------------------------------------
# zen.core.locality looks up the location of each input's bucket (storage Client.lookup_bucket, i.e.
# buckets.get: storage.buckets.get) wherever a job is placed or its start routed: a submission, the
# tick (sweeps, widening, admission), a heartbeat that gives a claim back or ends a queue's job (the
# next one is admitted), a stop that frees a queue's quota. So every function's account may look up
# each bucket of agent_input_buckets, with roles/storage.legacyBucketReader: bucket metadata (its
# location) and the objects' names, none of their contents. A custom role holding storage.buckets.get
# alone would be narrower, but a project's custom role can be granted only on that project's
# resources, and input buckets often belong to another project (the data team's): the apply would
# fail there. Without the role the lookup is refused and the data's location is unknown: locality is
# off, silently. For a bucket not in agent_input_buckets, give its location in the configuration's
# data.bucket_locations, which is read before any lookup.
locals {
  function_input_buckets = {
    for pair in setproduct(keys(local.functions), toset(var.agent_input_buckets)) : "${pair[0]}/${pair[1]}" => {
      function = pair[0]
      bucket   = pair[1]
    }
  }
}

resource "google_storage_bucket_iam_member" "function_locates_inputs" {
  for_each = local.function_input_buckets
  bucket   = each.value.bucket
  role     = "roles/storage.legacyBucketReader"
  member   = "serviceAccount:${google_service_account.function[each.value.function].email}"
}

# -- control subscriptions: made by Zen ------------------------------------------------------------
# The scale tick makes zen-vm-control-<vm> for every instance its MIGs list (zen.adapters.control_subscriptions:
# filter attributes.vm = "<vm>") and grants roles/pubsub.subscriber on it to the agent account of that VM's
# cluster and region alone (ZEN_AGENT_ACCOUNTS, functions.tf). The agents then need no project-wide right to
# create or consume subscriptions. Pub/Sub honours no IAM condition on a subscription's name (the IAM
# Conditions resource attributes list pubsublite.googleapis.com, not pubsub.googleapis.com, and
# Pub/Sub refuses conditional role bindings on its resources), so the tick's role below is
# project-wide: create, read, delete, and set the IAM policy of any subscription; it holds no consume. The
# tick deletes only the zen-vm-control-<vm> of a VM its MIG no longer lists: left to expire a day unread, the
# subscriptions of VMs made and deleted by the thousand a day filled the topic's 10,000 (Pub/Sub's limit of
# attached subscriptions per topic) and new VMs got none. Its holder is the tick's account, a trusted part of
# the control plane; an agent has none of it.
resource "google_project_iam_custom_role" "control_subscriptions" {
  role_id     = "${replace(var.name_prefix, "-", "_")}ControlSubscriptions"
  title       = "Zen control subscription maker"
  description = "Make each VM's zen-vm-control-<vm> subscription and grant it to the VM's cluster's agents."
  permissions = ["pubsub.subscriptions.create", "pubsub.subscriptions.delete", "pubsub.subscriptions.get",
  "pubsub.subscriptions.getIamPolicy", "pubsub.subscriptions.setIamPolicy"]

  depends_on = [google_project_service.apis]
}

resource "google_project_iam_member" "control_subscriptions" {
  project = var.project_id
  role    = google_project_iam_custom_role.control_subscriptions.id
  member  = "serviceAccount:${google_service_account.function["on_scale_tick"].email}"
}

# Making a subscription on zen-vm-control takes pubsub.topics.attachSubscription on that topic.
resource "google_pubsub_topic_iam_member" "tick_attaches_control" {
  topic  = google_pubsub_topic.zen["vm_control"].name
  role   = "roles/pubsub.subscriber"
  member = "serviceAccount:${google_service_account.function["on_scale_tick"].email}"
}

# -- agent ---------------------------------------------------------------------------------------
# Each account's agents publish heartbeats, pull from the (cluster, region) start subscriptions of the
# regions it serves only, and consume the control subscriptions Zen granted it.
#
# What is enforced: a VM cannot pull, ack or seek the start subscriptions of another cluster, or of its
# cluster's regions with other tags, nor any control subscription of their VMs, the dead letters,
# zen-job-events-all or the Eventarc trigger subscriptions (no project-wide consume); it cannot create or
# delete subscriptions. What is not: VMs of one account share it (a MIG gives all its VMs its template's),
# so a VM may consume the control subscriptions of the other VMs of its account (steal their confirms and
# stops) and the starts of the other regions it serves; heartbeats for another VM are refused by the identity token
# (zen.adapters.vm_proof), not by IAM. And pubsub.subscriptions.get on the project (the agent checks its
# control subscription's topic and filter, zen.agent.transport) reads any subscription's
# configuration, never its messages.

resource "google_pubsub_topic_iam_member" "agent_heartbeats" {
  for_each = google_service_account.agent
  topic    = google_pubsub_topic.zen["heartbeats"].name
  role     = "roles/pubsub.publisher"
  member   = "serviceAccount:${each.value.email}"
}

resource "google_pubsub_subscription_iam_member" "agent_job_start" {
  for_each     = google_pubsub_subscription.job_start
  subscription = each.value.name
  role         = "roles/pubsub.subscriber"
  member       = "serviceAccount:${google_service_account.agent[local.agent_account_of[local.mig_targets[each.key].cluster][local.mig_targets[each.key].region]].email}"
}

resource "google_project_iam_custom_role" "agent_subscriptions" {
  role_id     = "${replace(var.name_prefix, "-", "_")}AgentSubscriptions"
  title       = "Zen agent subscription check"
  description = "Read a subscription's configuration: the agent checks its control subscription's topic and filter."
  permissions = ["pubsub.subscriptions.get"]

  depends_on = [google_project_service.apis]
}

resource "google_project_iam_member" "agent_subscriptions" {
  for_each = google_service_account.agent
  project  = var.project_id
  role     = google_project_iam_custom_role.agent_subscriptions.id
  member   = "serviceAccount:${each.value.email}"
}

# Logs of the agent and its jobs: the agent writes every job's output to the log zen-jobs (what `zen logs`
# and output job_logs_query read). Log writing is a project-level permission with nothing narrower to bind to:
# logging.logEntries.create is checked on the project, and Cloud Logging honours IAM conditions on log
# views (reading), not on the log name or resource of an entry written. So a VM may write entries under
# any log name, the functions' too; the metrics and alerts read the functions' log names only
# (monitoring.tf, zen_function_logs), which keeps the agents' own lines out, not forged ones. Keeping
# forgeries out takes a project of their own for the agents' logs (not built).
resource "google_project_iam_member" "agent_logs" {
  for_each = google_service_account.agent
  project  = var.project_id
  role     = "roles/logging.logWriter"
  member   = "serviceAccount:${each.value.email}"
}

# The agent wheel, and nothing else in the bucket (Cloud Storage honours object-name conditions).
resource "google_storage_bucket_iam_member" "agent_reads_wheel" {
  for_each = google_service_account.agent
  bucket   = google_storage_bucket.artifacts.name
  role     = "roles/storage.objectViewer"
  member   = "serviceAccount:${each.value.email}"

  condition {
    title       = "zen-agent-wheel-only"
    description = "Only objects under agent/"
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.artifacts.name}/objects/agent/\")"
  }
}

# Data clearance (the Zen configuration's data_clearance: zen.core.clearance). Zen places a job touching a
# bound prefix only on VMs carrying all of the binding's tags; these grants are per bucket, not per prefix (Cloud
# Storage's managed folders or object-name conditions could narrow them: not built), so a bucket
# holding any bound prefix goes only to the agent accounts whose tags (those of the regions they serve) hold
# all the tags of every binding on that bucket. Its other data is then cleared-only too. A cluster cleared in
# some regions only (region_tags) has an account for them apart from its others', which get nothing.
locals {
  clearance_bindings = [for b in try(local.zen_config.data_clearance, []) : {
    bucket = regex("^gs://([^/]+)", b.prefix)[0]
    tags   = b.tags
  }]
  # Bucket with a bound prefix -> the keys of the agent accounts that may read (and write) it.
  cleared_accounts = {
    for bucket in distinct([for b in local.clearance_bindings : b.bucket]) : bucket => [
      for key, account in local.agent_accounts : key if alltrue([
        for b in local.clearance_bindings : length(setsubtract(b.tags, account.tags)) == 0 if b.bucket == bucket
      ])
    ]
  }
}

# Jobs' secrets (zen.agent.secrets): the agent reads each secret version a job names with its VM's account,
# so each of a cluster's accounts may access the secrets agent_secrets lists for that cluster, bound on each secret
# (never project-wide: a project-level secretAccessor reads every secret of the project, Zen's own proof
# secret included). A job's value never passes through the functions, which get nothing here. A cluster not
# of the Zen configuration keeps one binding, keyed by its name, for the precondition to refuse.
locals {
  agent_secret_bindings = merge(flatten([for cluster, secrets in var.agent_secrets : [
    for key in try(values(local.agent_account_keys[cluster]), [cluster]) : {
      for secret in secrets : "${key}/${secret}" => { cluster = cluster, account = key, secret = secret }
    }
  ]])...)
}

resource "google_secret_manager_secret_iam_member" "agent_reads_secrets" {
  for_each  = { for key, b in local.agent_secret_bindings : key => b if !can(regex("/locations/", b.secret)) }
  project   = startswith(each.value.secret, "projects/") ? null : var.project_id
  secret_id = each.value.secret
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.agent[each.value.account].email}"

  lifecycle {
    precondition {
      condition     = contains(keys(local.agent_clusters), each.value.cluster)
      error_message = "agent_secrets names cluster ${each.value.cluster}, which is not a cluster of the Zen configuration."
    }
  }
}

# A regional secret (projects/PROJECT/locations/LOCATION/secrets/NAME: its data kept in LOCATION) is bound
# through the regional secrets' own IAM resource, given its project, location and id.
resource "google_secret_manager_regional_secret_iam_member" "agent_reads_regional_secrets" {
  for_each = { for key, b in local.agent_secret_bindings : key => merge(b, regex(
    "^projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/secrets/(?P<secret_id>[^/]+)$", b.secret))
  if can(regex("/locations/", b.secret)) }
  project   = each.value.project
  location  = each.value.location
  secret_id = each.value.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.agent[each.value.account].email}"

  lifecycle {
    precondition {
      condition     = contains(keys(local.agent_clusters), each.value.cluster)
      error_message = "agent_secrets names cluster ${each.value.cluster}, which is not a cluster of the Zen configuration."
    }
  }
}

# Jobs' data (zen.agent.staging): read on the input buckets, write on the output buckets, each bucket
# named in the variables and nothing else; a bucket with bound data (above) to its cleared accounts only.
# Writing needs Object User, not Object Creator: the client retries a failed upload, and a retry of one that
# did land replaces the object, which takes storage.objects.delete (Object Creator cannot overwrite; the
# attempt would fail on a 403).
locals {
  agent_input_bindings = {
    for pair in setproduct(keys(local.agent_accounts), toset(var.agent_input_buckets)) : "${pair[0]}/${pair[1]}" => {
      account = pair[0], bucket = pair[1]
    } if contains(lookup(local.cleared_accounts, pair[1], keys(local.agent_accounts)), pair[0])
  }
  agent_output_bindings = {
    for pair in setproduct(keys(local.agent_accounts), toset(var.agent_output_buckets)) : "${pair[0]}/${pair[1]}" => {
      account = pair[0], bucket = pair[1]
    } if contains(lookup(local.cleared_accounts, pair[1], keys(local.agent_accounts)), pair[0])
  }
  agent_image_bindings = {
    for pair in setproduct(keys(local.agent_accounts), var.agent_image_repositories) : "${pair[0]}/${pair[1].location}/${pair[1].repository}" => {
      account = pair[0], location = pair[1].location, repository = pair[1].repository
    }
  }
}

resource "google_storage_bucket_iam_member" "agent_reads_inputs" {
  for_each = local.agent_input_bindings
  bucket   = each.value.bucket
  role     = "roles/storage.objectViewer"
  member   = "serviceAccount:${google_service_account.agent[each.value.account].email}"
}

resource "google_storage_bucket_iam_member" "agent_writes_outputs" {
  for_each = local.agent_output_bindings
  bucket   = each.value.bucket
  role     = "roles/storage.objectUser"
  member   = "serviceAccount:${google_service_account.agent[each.value.account].email}"
}

resource "google_artifact_registry_repository_iam_member" "agent_pulls_images" {
  for_each   = local.agent_image_bindings
  location   = each.value.location
  repository = each.value.repository
  role       = "roles/artifactregistry.reader"
  member     = "serviceAccount:${google_service_account.agent[each.value.account].email}"
}

# -- function builds -----------------------------------------------------------------------------

resource "google_storage_bucket_iam_member" "build_reads_source" {
  bucket = google_storage_bucket.artifacts.name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.build.email}"

  condition {
    title       = "zen-function-source-only"
    description = "Only objects under functions/"
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.artifacts.name}/objects/functions/\")"
  }
}

# Gen2 builds do not fetch the source from the bucket named in build_config: Cloud Functions copies it
# into its own bucket gcf-v2-sources-<project number>-<region> first, and the build reads that copy
# (a build without this fails with "Access to bucket gcf-v2-sources-... denied. You must grant Storage
# Object Viewer permission to <build service account>": hashicorp/terraform-provider-google#20571).
# Google creates and names that bucket, so no bucket-level binding can exist before the first build:
# Object Viewer on the project, conditioned on that one bucket and its objects (Cloud Storage honours
# resource names in conditions). The binding above, on our artifact bucket, stays limited to functions/.
locals {
  gcf_sources_bucket = "gcf-v2-sources-${data.google_project.this.number}-${var.region}"
}

resource "google_project_iam_member" "build_reads_gcf_sources" {
  project = var.project_id
  role    = "roles/storage.objectViewer"
  member  = "serviceAccount:${google_service_account.build.email}"

  condition {
    title       = "zen-gcf-sources-only"
    description = "Only the Cloud Functions source bucket of this project and region"
    expression  = "resource.name == \"projects/_/buckets/${local.gcf_sources_bucket}\" || resource.name.startsWith(\"projects/_/buckets/${local.gcf_sources_bucket}/objects/\")"
  }
}

resource "google_artifact_registry_repository_iam_member" "build_writes_images" {
  location   = google_artifact_registry_repository.functions.location
  repository = google_artifact_registry_repository.functions.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.build.email}"
}

# Cloud Build writes its logs to the project's logs: no narrower binding exists.
resource "google_project_iam_member" "build_logs" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${google_service_account.build.email}"
}

# Pub/Sub's data-access audit logs for publishes (DATA_WRITE), which tie each submission and stop to the
# principal that published it, beside the sender its ID token proves (zen.adapters.submitters). Zen's own
# publishers (the functions, the VMs' heartbeats) are exempted: they are most of the volume, and their
# messages carry their own proof. Authoritative for pubsub.googleapis.com in this project (deploy Zen
# in a project of its own); pubsub_audit_logs = false leaves the project's audit configuration alone.
resource "google_project_iam_audit_config" "pubsub" {
  count   = var.pubsub_audit_logs ? 1 : 0
  project = var.project_id
  service = "pubsub.googleapis.com"
  audit_log_config {
    log_type = "DATA_WRITE"
    exempted_members = concat(
      [for account in google_service_account.function : "serviceAccount:${account.email}"],
      [for account in google_service_account.agent : "serviceAccount:${account.email}"],
    )
  }
}

# `zen logs` reads a job's output from Cloud Logging (log zen-jobs): log_readers may read the project's logs.
# Cloud Logging grants reading by project (or log bucket view), not by log name: a reader sees every job's
# output and the functions' logs, which is why Zen is deployed in a project of its own. Empty by default.
resource "google_project_iam_member" "log_readers" {
  for_each = toset(var.log_readers)
  project  = var.project_id
  role     = "roles/logging.viewer"
  member   = each.value
}
