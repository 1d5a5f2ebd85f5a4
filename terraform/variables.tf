# Inputs of the Zen deployment. Required: project_id and clusters; everything else has a default
# suited to a small deployment. See terraform.tfvars.example.

variable "project_id" {
  type        = string
  description = "Google Cloud project to deploy Zen into. A project of its own is recommended: the agents' subscription permissions are project-wide (see iam.tf)."
}

variable "region" {
  type        = string
  default     = "us-central1"
  description = "Region of the control plane: the functions, Cloud SQL, the scheduler job, the artifact bucket and the Serverless VPC Access connector."
}

variable "name_prefix" {
  type        = string
  default     = "zen"
  description = "Prefix of the names of the buckets, SQL instance, functions and service accounts. Topic, subscription and MIG names come from the Zen configuration and are not prefixed."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,11}$", var.name_prefix))
    error_message = "name_prefix is 2 to 12 lowercase letters, digits or '-', starting with a letter (service account ids are limited to 30 characters)."
  }
}

# -- what to run ---------------------------------------------------------------------------------

variable "clusters" {
  description = <<-EOT
    Deprecated: leave unset. Terraform reads the clusters from the Zen configuration the functions use
    (the shipped `zen_config_file`, or shared/zen/core/default_config.yaml: clusters.tf), and each
    cluster's image, boot disk size and zones from `cluster_settings`. When given, it must describe the
    same clusters (names, regions, machine and GPU fields, VM limits, provisioning models): a plan fails
    otherwise; its `image`, `boot_disk_size_gb`, `zones`, `provisioning` and `spot` are then used.
  EOT
  default     = null
  type = list(object({
    name               = string
    gpu_type           = string
    gpu_count          = number
    machine_type       = string
    regions            = list(string)
    max_vms_per_region = number
    max_vms            = number
    min_vms            = optional(number, 0)
    image              = optional(string)
    boot_disk_size_gb  = optional(number, 200)
    provisioning       = optional(list(string))
    spot               = optional(bool) # deprecated: provisioning
    zones              = optional(map(list(string)), {})
  }))

  validation {
    condition = var.clusters == null ? true : alltrue([for c in var.clusters : c.provisioning == null ? true : (
      length(c.provisioning) > 0 && length(distinct(c.provisioning)) == length(c.provisioning) &&
    alltrue([for m in c.provisioning : contains(["spot", "standard", "flex-start"], m)]))])
    error_message = "a cluster's provisioning lists spot, standard or flex-start, each at most once, and at least one."
  }

  validation {
    condition     = var.clusters == null ? true : length(var.clusters) > 0 && length(distinct([for c in var.clusters : c.name])) == length(var.clusters)
    error_message = "clusters must be non-empty and cluster names unique."
  }
  validation {
    condition     = var.clusters == null ? true : alltrue([for c in var.clusters : can(regex("^[a-z0-9][a-z0-9-]{0,40}$", c.name)) && length(c.regions) > 0])
    error_message = "cluster names are lowercase letters, digits and '-' (as in the Zen configuration), each with at least one region."
  }
}

variable "cluster_settings" {
  description = <<-EOT
    What only terraform needs per cluster of the Zen configuration (which lists the clusters: clusters.tf),
    keyed by cluster name: `image` (defaults to `default_image`), `boot_disk_size_gb` (200), `zones` per
    region (defaults to every zone of the region; list only zones that offer the GPU:
    `gcloud compute accelerator-types list --filter=name=nvidia-l4`). A name the configuration does not
    have fails the plan, as do zones of a region it lacks (unread), of another region, or twice (zone_problems).
    A region's zones are those of its MIGs when they are made: changed later, they reach a MIG only when it is
    replaced (the provider would delete its VMs and their jobs: docs/how-to/operate.md).
  EOT
  type = map(object({
    image             = optional(string)
    boot_disk_size_gb = optional(number, 200)
    zones             = optional(map(list(string)), {})
  }))
  default = {}
}

variable "zen_config_file" {
  type        = string
  default     = null
  description = "Path of the Zen YAML configuration shipped with the functions (`make package CONFIG=...`) and given to the agents as the instance attribute zen-config. Null: the default configuration inside the package is used."
}

variable "package_dir" {
  type        = string
  default     = null
  description = "Directory written by `make package` (manifest.json, the functions archive, the agent wheel). Null: ../dist next to this module."
}

variable "agent_package" {
  type        = string
  default     = null
  description = "What the VMs install (instance attribute zen-agent-package): a pip requirement or a gs:// URL of a wheel. Null: the wheel built by `make package`, uploaded to the artifact bucket."
}

# -- functions -----------------------------------------------------------------------------------

variable "functions" {
  description = <<-EOT
    Scaling of each function. Each instance opens at most ZEN_DB_MAX_OPEN database connections:
    concurrency x what one request holds at once (a submission or a heartbeat that scales 2, the tick
    3, a stop 1), plus 1 for the instance's background outbox marks (sql.tf). The plan fails unless
    the sum over functions of max_instances x that, plus 10 for superusers and people, fits in
    db_max_connections. Defaults: 5 x (2x4+1) + 3 x (2x4+1) + 3 x (1x2+1) + 1 x (3x1+1) = 45 + 27 + 9
    + 4 = 85, + 10 = 95 of 100. Heartbeats are one short statement each (a scaling pass only when a VM
    became usable): 3 instances x 4 at once serve hundreds a second. on_scale_tick runs one at a time (an advisory lock makes a second tick skip),
    so one instance with concurrency 1 is all it can use.
  EOT
  type = map(object({
    max_instances = number
    concurrency   = number
    memory        = optional(string, "512Mi")
    cpu           = optional(string, "1")
    timeout_s     = optional(number, 60)
  }))
  default = {
    on_job_submitted  = { max_instances = 5, concurrency = 4 }
    on_heartbeat      = { max_instances = 3, concurrency = 4 }
    on_stop_requested = { max_instances = 3, concurrency = 2 }
    on_scale_tick     = { max_instances = 1, concurrency = 1, timeout_s = 240 }
  }

  validation {
    condition     = toset(keys(var.functions)) == toset(["on_job_submitted", "on_heartbeat", "on_stop_requested", "on_scale_tick"])
    error_message = "functions must configure exactly on_job_submitted, on_heartbeat, on_stop_requested and on_scale_tick."
  }

  # Google runs an event-driven 2nd gen function (all four are: Eventarc triggers) for 540 s at most; a longer
  # timeout_s was left for Google's API to refuse in the middle of an apply.
  validation {
    condition     = alltrue([for f in values(var.functions) : f.timeout_s >= 1 && f.timeout_s <= 540])
    error_message = "functions' timeout_s is 1 to 540 s: Google runs an event-driven 2nd gen function for 540 s at most."
  }
}

variable "vm_proof" {
  type        = string
  default     = "required"
  description = "required: a heartbeat is applied only when it carries (attribute vm_proof) the Google-signed identity token of the VM it names, so nothing else that can publish on zen-heartbeats can report for a VM. off: the VM named in a heartbeat is believed (agents older than the check send no token; set off while they run, then back to required)."

  validation {
    condition     = contains(["off", "required"], var.vm_proof)
    error_message = "vm_proof is off or required."
  }
}

variable "submitter_auth" {
  type        = string
  default     = "required"
  description = "required: a submission or stop is applied only with its sender's Google-signed ID token (attribute zen_auth), and the job's user is the e-mail it proves; the configuration's queue rules say who may submit where and stop what. off: the user_id a message claims is believed (anyone in submitters can act as any user)."

  validation {
    condition     = contains(["off", "required"], var.submitter_auth)
    error_message = "submitter_auth is off or required."
  }
}

variable "pubsub_audit_logs" {
  type        = bool
  default     = true
  description = "Enable Pub/Sub's data-access audit logs for publishes (DATA_WRITE), Zen's own publishers exempted: who published each submission and stop. Authoritative for pubsub.googleapis.com in the project."
}

variable "log_readers" {
  type        = list(string)
  default     = []
  description = "IAM members (user:, group:, serviceAccount:) who may read jobs' output with `zen logs`: roles/logging.viewer on the project, which shows every job's output and the functions' logs (Cloud Logging grants no narrower read by log name)."

  validation {
    condition     = alltrue([for m in var.log_readers : can(regex("^(user|group|serviceAccount|domain|principal|principalSet):.+", m))])
    error_message = "log_readers are IAM members, e.g. \"group:ml-team@example.com\"."
  }
}

variable "billing_account" {
  type        = string
  default     = null
  description = "The billing account id (XXXXXX-XXXXXX-XXXXXX) this project bills to: given, terraform creates a monthly budget with alerts (budget.tf). Null: no budget."
}

variable "monthly_budget_usd" {
  type        = number
  default     = 1000
  description = "The monthly budget's amount in USD (with billing_account): alerts at 50%, 90%, 100% and at 100% forecast. `zen clusters` prints the worst case the configuration allows."

  validation {
    condition     = var.monthly_budget_usd > 0
    error_message = "monthly_budget_usd is above 0."
  }
}

variable "max_delivery_attempts" {
  type        = number
  default     = 10
  description = "Deliveries of one message to a function before it goes to the topic's dead-letter topic (5 to 100). A database outage answers 500, so keep enough attempts to ride out a short one."

  validation {
    condition     = var.max_delivery_attempts >= 5 && var.max_delivery_attempts <= 100
    error_message = "Pub/Sub accepts 5 to 100 delivery attempts."
  }
}

variable "attach_dead_letter_topics" {
  type        = bool
  default     = true
  description = "Attach the dead-letter topics to the Eventarc-managed trigger subscriptions with gcloud during apply (the Eventarc API cannot set them; needs gcloud on the machine running terraform). The same call sets each retried trigger subscription's ack deadline to its function's timeout. False: the dead-letter topics exist but nothing routes to them, and those subscriptions keep Eventarc's 10 s ack deadline, so a request served longer is delivered again."
}

variable "grant_pubsub_token_creator" {
  type        = bool
  default     = false
  description = "Grant the Pub/Sub service agent Token Creator on the trigger service accounts. Needed only in projects whose Pub/Sub service agent was enabled on or before 8 April 2021."
}

variable "scale_tick_schedule" {
  type        = string
  default     = "* * * * *"
  description = "Cron schedule (UTC) of the Cloud Scheduler job publishing to zen-scale-tick: outbox resend, lost-job sweep and the scaler."
}

# -- database ------------------------------------------------------------------------------------

variable "db_tier" {
  type        = string
  default     = "db-custom-1-3840"
  description = "Cloud SQL machine tier (1 vCPU, 3.75 GB: max_connections 100 by default, enough for the default function limits). Another tier: set db_max_connections to its max_connections (sql.tf reads it from db-f1-micro, db-g1-small and db-custom-CPUS-MB names)."
}

variable "db_availability_type" {
  type        = string
  default     = "ZONAL"
  description = "ZONAL or REGIONAL (a standby in another zone, twice the price)."

  validation {
    condition     = contains(["ZONAL", "REGIONAL"], var.db_availability_type)
    error_message = "db_availability_type is ZONAL or REGIONAL."
  }
}

variable "db_name" {
  type        = string
  default     = "zen"
  description = "Name of the Postgres database."
}

variable "db_deletion_protection" {
  type        = bool
  default     = true
  description = "Deletion protection on the Cloud SQL instance (terraform and API). Set false, apply, then destroy."
}

variable "db_public_ip" {
  type        = bool
  default     = false
  description = "Also give Cloud SQL a public IP, without authorized networks: only the Cloud SQL connectors and Auth Proxy reach it (connector enforcement), with IAM. Lets `zen db migrate` run from a machine outside the VPC."
}

variable "db_admin_users" {
  type        = list(string)
  default     = []
  description = "E-mails of people who may connect to this instance (Cloud SQL Client and Instance User on it only, and a Cloud SQL IAM user each), e.g. to inspect the database, or to start the Cloud SQL Auth Proxy for migrations. Migrations run as the built-in `postgres` user, not as these IAM users (docs/how-to/deploy.md, step 3: `zen db migrate` and db_grants_sql through the proxy): an IAM user owns nothing, may not create in schema public (PostgreSQL 16), and db_grants_sql's default privileges cover only what `postgres` creates. Their IAM users get no table privileges: to read the tables, list them in db_reader_users too."
}

variable "submitters" {
  type        = list(string)
  default     = []
  description = "IAM members (user:, group:, serviceAccount:, domain:) who may submit and stop jobs (`zen submit`, `zen stop`): Pub/Sub Publisher on zen-job-submitted and zen-job-stop only. Do not grant roles/pubsub.publisher on the project instead: it also covers zen-heartbeats and zen-vm-control, so a user could forge heartbeats and orders to the VMs."

  validation {
    condition     = alltrue([for m in var.submitters : can(regex("^(user|group|serviceAccount|domain|principal|principalSet):.+", m))])
    error_message = "submitters are IAM members, e.g. \"user:alice@example.com\" or \"group:ml-team@example.com\"."
  }
}

variable "db_reader_users" {
  type        = list(string)
  default     = []
  description = "E-mails of people who run the read commands (`zen jobs`, `zen watch`, `zen explain`) against this deployment: each gets a Cloud SQL IAM user with read-only access (the zen_reader role of db_grants_sql) and connect/login rights on this instance only."
}

# -- network -------------------------------------------------------------------------------------

variable "network" {
  type        = string
  default     = "default"
  description = "VPC network (name) for the GPU VMs, Cloud SQL's private IP and the functions' VPC connector. It must exist unless create_network is true."
}

variable "create_network" {
  type        = bool
  default     = false
  description = "Create the network named by `network` (auto mode: a subnetwork in every region, no firewall rules opening it). Set true in a project without a `default` network."
}

variable "subnetworks" {
  type        = map(string)
  default     = {}
  description = "Subnetwork (name or self link) per GPU region, for custom-mode networks. A region missing here uses the network's auto-mode subnetwork."
}

variable "create_private_service_access" {
  type        = bool
  default     = true
  description = "Reserve a range and peer the network with Google services (private services access) for Cloud SQL's private IP. Set false if the network already has it."
}

variable "vpc_connector_cidr" {
  type        = string
  default     = "10.8.0.0/28"
  description = "Unused /28 range in the network for the Serverless VPC Access connector the functions reach Cloud SQL through."
}

variable "create_nat" {
  type        = bool
  default     = true
  description = "Create a Cloud Router and Cloud NAT in each GPU region, so VMs without external IPs can install the agent (PyPI) and pull job images."
}

variable "agent_external_ip" {
  type        = bool
  default     = false
  description = "Give GPU VMs an ephemeral external IP. Off by default: Cloud NAT provides egress."
}

# -- GPU VMs -------------------------------------------------------------------------------------

variable "default_image" {
  type        = string
  default     = "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"
  description = "Boot image of the GPU VMs unless a cluster sets its own: a Deep Learning VM family with the NVIDIA driver, Docker with the NVIDIA container toolkit and Python >= 3.11 (or apt access to it), as startup.sh expects."
}

variable "spot" {
  type        = bool
  default     = null
  description = "Deprecated (a cluster's provisioning in the Zen configuration replaces it; a cluster that lists none is [\"standard\"]): when set, it must say what the configuration says of every cluster that var.clusters gives no provisioning or spot (true: [\"spot\"], false: [\"standard\"]), else the plan fails, so that Zen never prices and places a VM as another model than terraform made it."
}

variable "secure_boot" {
  type        = bool
  default     = false
  description = "Shielded VM Secure Boot. Off by default because the NVIDIA kernel modules of Deep Learning VM images are not signed; vTPM and integrity monitoring are always on."
}

variable "agent_image_repositories" {
  type = list(object({
    location   = string
    repository = string
  }))
  default     = []
  description = "Artifact Registry repositories (in this project) the agents may pull job images from; each gets an Artifact Registry Reader binding for the agent's service account on that repository only."
}

variable "agent_input_buckets" {
  type        = list(string)
  default     = []
  description = "Cloud Storage buckets jobs read `inputs` from: the agents' service account gets Storage Object Viewer on each of these buckets only (no project-wide storage role), and the functions and the web console may read each bucket's location (roles/storage.legacyBucketReader: metadata and object names, no contents; for data locality, and the data part of each job's `zen explain` line). For an input bucket not listed here, set its location in the Zen configuration's data.bucket_locations: its lookup would be refused and its data's location unknown. A bucket holding a prefix of the configuration's data_clearance goes only to the agent accounts whose VMs' tags clear it (iam.tf: a cluster's regions with different tags have different accounts)."
}

variable "agent_output_buckets" {
  type        = list(string)
  default     = []
  description = "Cloud Storage buckets jobs write `outputs` to: the agents' service account gets Storage Object User on each of these buckets only (create, and overwrite when an upload is retried); a bucket holding a prefix of the configuration's data_clearance, only the agent accounts whose VMs' tags clear it."
}

variable "agent_secrets" {
  type        = map(list(string))
  default     = {}
  description = "Secret Manager secrets each cluster's jobs may read (a job's `secrets`, read by the agent on the VM): cluster name -> secret ids, each `NAME` (a secret of project_id), `projects/PROJECT/secrets/NAME` or, for a regional secret, `projects/PROJECT/locations/LOCATION/secrets/NAME`. That cluster's agents' service accounts (one per tag set of its regions) get roles/secretmanager.secretAccessor on each of these secrets only. Which references a job may name is the Zen configuration's (a queue's `secrets`, or the top-level `secrets` without queues); both must allow it."

  validation {
    condition     = alltrue([for secrets in values(var.agent_secrets) : alltrue([for s in secrets : can(regex("^(projects/[^/]+/(locations/[a-z][a-z0-9-]+/)?secrets/)?[A-Za-z0-9_-]{1,255}$", s))])])
    error_message = "agent_secrets: each secret is NAME, projects/PROJECT/secrets/NAME or projects/PROJECT/locations/LOCATION/secrets/NAME (letters, digits, '_' and '-'), without /versions/: access is granted on the secret."
  }
}

variable "agent_env" {
  type        = map(string)
  default     = {}
  description = "The agents' tunables (docs/reference/agent.md, \"Tunables\"): ZEN_AGENT_* name -> value, e.g. { ZEN_AGENT_PULL_STALL_S = \"1800\" } for very large images. Given to every VM as the instance attribute zen-agent-env, which the startup script writes into the agent's unit; a change reaches the VMs created after it (the MIGs apply a new template to new VMs only). Not ZEN_AGENT_WORK_DIR, ZEN_AGENT_FENCE_FILE (the startup script's own), ZEN_AGENT_STOP_GRACE_S (the configuration's deadlines.stop_grace_s: systemd's stop timeout follows it) nor ZEN_AGENT_LOCAL (jobs would run unconfined)."

  validation {
    condition = alltrue([for name, value in var.agent_env : can(regex("^ZEN_AGENT_[A-Z0-9_]+$", name)) && !contains(
    ["ZEN_AGENT_WORK_DIR", "ZEN_AGENT_FENCE_FILE", "ZEN_AGENT_STOP_GRACE_S", "ZEN_AGENT_LOCAL"], name)])
    error_message = "agent_env: each name is ZEN_AGENT_* (capitals, digits, '_'), and none of ZEN_AGENT_WORK_DIR, ZEN_AGENT_FENCE_FILE, ZEN_AGENT_STOP_GRACE_S, ZEN_AGENT_LOCAL, which the startup script sets itself or refuses."
  }
  validation {
    condition     = alltrue([for value in values(var.agent_env) : !can(regex("[[:cntrl:]]", value))])
    error_message = "agent_env: each value is one line of text (no newline, tab or other control character)."
  }
}

variable "checkpoint_retention_days" {
  type        = number
  default     = 30
  description = "Objects of the checkpoints bucket (the configuration's checkpoints.bucket) are deleted this many days after they were written: a job must save at least this often (its checkpoint.every) for a rerun to find its checkpoint."
  validation {
    condition     = var.checkpoint_retention_days >= 1
    error_message = "checkpoint_retention_days must be at least 1."
  }
}

variable "labels" {
  type        = map(string)
  default     = {}
  description = "Labels added to every labelled resource."
}

variable "notifier" {
  description = <<-EOT
    Scaling of the notifier (on_job_event, notifications.tf). It is pushed only the events that can be a
    notice; each request holds one database connection at a time, and an instance opens at most 2 (the
    others wait), so its connections are max_instances x 2: with the defaults, 4, and the functions' 85 +
    10 reserved, 99 of 100. timeout_s bounds a request, which tries an event's targets one after another:
    each takes at most its secret's read (10 s) and one POST (the configuration's notifications.timeout_s,
    10 s), and an event may have 8 (a job's 4 and its queue's 4), so 160 s; keep it above that. A target
    whose claim (2 x notifications.timeout_s + 30 s) would outlast it is left to the event's redelivery.
  EOT
  type = object({
    max_instances = optional(number, 2)
    concurrency   = optional(number, 8)
    memory        = optional(string, "512Mi")
    cpu           = optional(string, "1")
    timeout_s     = optional(number, 180)
  })
  default = {}
}

# -- web console ---------------------------------------------------------------------------------

variable "console_domain" {
  type        = string
  default     = ""
  description = "The domain the read-only web console is served on (console.tf: an HTTPS load balancer with a Google-managed certificate, behind Identity-Aware Proxy); point its DNS A record at the console_address output. Empty: no console."
}

variable "console_viewers" {
  type        = list(string)
  default     = []
  description = "Who Identity-Aware Proxy lets through to the console (IAM members: user:a@example.com, group:ml@example.com, domain:example.com). What each then sees follows the queue rules (docs/how-to/console.md)."
}

variable "console_oauth_client_id" {
  type        = string
  default     = ""
  description = "The OAuth client (APIs & Services > Credentials, a Web application) Identity-Aware Proxy signs viewers in with. Its Authorized redirect URIs must hold https://iap.googleapis.com/v1/oauth/clientIds/<this id>:handleRedirect (docs/how-to/console.md)."
}

variable "console_oauth_client_secret" {
  type        = string
  default     = ""
  sensitive   = true
  description = "The secret of console_oauth_client_id."
}

variable "console" {
  description = <<-EOT
    Scaling of the console's function (console.tf). A page holds one database connection for one read
    transaction at a time, and an instance opens at most db_max_open (the others wait): its connections are
    max_instances x db_max_open, counted with the functions' against db_max_connections (the defaults
    leave room for 1). timeout_s bounds a request, and so each stream of a job's output (the browser
    reconnects where it left off). concurrency is also the instance's request threads (THREADS): a job
    page's output stream holds one for as long as it lasts.
  EOT
  type = object({
    max_instances = optional(number, 1)
    concurrency   = optional(number, 16)
    db_max_open   = optional(number, 1)
    memory        = optional(string, "512Mi")
    cpu           = optional(string, "1")
    timeout_s     = optional(number, 300)
  })
  default = {}
}
