# The four gen2 Cloud Functions (entry points in functions/main.py), all from the one archive built
# by `make package`, each with its own service account and an Eventarc Pub/Sub trigger; and the
# Cloud Scheduler job that publishes the scale tick.

locals {
  # retry: whether a failed delivery (a 5xx: the database unreachable) is redelivered, and then
  # dead-lettered after max_delivery_attempts. Not the tick's: ticks are interchangeable, the next
  # one comes a minute later and does the same work, so a failed one is simply dropped. Retried, every
  # fresh deploy filled its dead-letter topic (and fired the alert): the scheduler publishes ticks as
  # soon as apply creates it, before the database is migrated (docs/how-to/deploy.md, step 3).
  # db_role: the database role (shared/zen/store/migrations/0030_function_roles.sql) the function's own IAM
  # database user is made a member of, alone (db_grants_sql): the tables and columns its statements use.
  functions = {
    on_job_submitted  = { account = "submit", scaling = true, retry = true, db_role = "zen_submitter" }
    on_heartbeat      = { account = "heartbeat", scaling = true, retry = true, db_role = "zen_heartbeat" }
    on_stop_requested = { account = "stop", scaling = false, retry = true, db_role = "zen_stopper" }
    on_scale_tick     = { account = "tick", scaling = true, retry = false, db_role = "zen_ticker" }
  }
  # Where gen2 functions keep their source at run time.
  shipped_config_path = "/workspace/${coalesce(local.manifest.config, "zen_config.yaml")}"
  # The tick's ZEN_AGENT_ACCOUNTS: cluster -> region -> the email of the account its VMs run as (iam.tf).
  agent_accounts_env = jsonencode({
    for cluster, regions in local.agent_account_of : cluster => {
      for region, key in regions : region => google_service_account.agent[key].email
    }
  })
}

resource "google_cloudfunctions2_function" "zen" {
  for_each    = local.functions
  name        = "${var.name_prefix}-${replace(each.key, "_", "-")}"
  location    = var.region
  description = "Zen ${each.key} (functions/main.py), triggered by ${local.topics[local.trigger_topics[each.key]]}"
  labels      = local.labels

  build_config {
    runtime           = "python311"
    entry_point       = each.key
    service_account   = google_service_account.build.id
    docker_repository = google_artifact_registry_repository.functions.id
    source {
      storage_source {
        bucket = google_storage_bucket.artifacts.name
        object = google_storage_bucket_object.functions_source.name
      }
    }
  }

  service_config {
    service_account_email            = google_service_account.function[each.key].email
    max_instance_count               = var.functions[each.key].max_instances
    min_instance_count               = 0 # idle costs nothing
    max_instance_request_concurrency = var.functions[each.key].concurrency
    available_memory                 = var.functions[each.key].memory
    available_cpu                    = var.functions[each.key].cpu
    timeout_seconds                  = var.functions[each.key].timeout_s
    # Eventarc's push requests count as internal traffic: nothing else can call the functions.
    ingress_settings               = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision = true
    vpc_connector                  = google_vpc_access_connector.zen.id
    vpc_connector_egress_settings  = "PRIVATE_RANGES_ONLY"

    environment_variables = merge(
      {
        ZEN_PROJECT           = var.project_id
        ZEN_CLOUDSQL_INSTANCE = google_sql_database_instance.zen.connection_name
        ZEN_DB_USER           = google_sql_user.functions[each.key].name
        ZEN_DB_NAME           = google_sql_database.zen.name
        ZEN_CLOUDSQL_IP_TYPE  = "PRIVATE"
        # The most connections one instance opens (sql.tf: what the plan checks against max_connections).
        ZEN_DB_MAX_OPEN = tostring(local.db_max_open[each.key])
        # The most a query waits for Postgres to answer: under the timeout, so that a server that stops answering
        # (no reset) frees the request and its connection slot (zen.store.connect.bounded).
        ZEN_DB_QUERY_TIMEOUT_S = tostring(max(5, var.functions[each.key].timeout_s - 10))
        # The function's timeout: Postgres ends a transaction, or a scaling lock's connection, idle that long (a
        # request cut at its timeout, its instance left running throttled), and a tick past it stops
        # (zen.store.db.Database.session_lock, zen.store.connect.bounded, Zen.on_scale_tick).
        ZEN_FUNCTION_TIMEOUT_S = tostring(var.functions[each.key].timeout_s)
        # A request thread for each request Cloud Run sends at once (functions-framework's default is 4 per vCPU:
        # console.tf).
        THREADS = tostring(var.functions[each.key].concurrency)
        # Stops never scale; without Compute permissions they must not try. A heartbeat whose VM became
        # usable runs its cluster's scaling pass (Zen.on_heartbeat: the boots that lost the race go).
        ZEN_SCALING = each.value.scaling ? "on" : "off"
        # Heartbeats must carry their VM's Google-signed identity token naming the VM they report for.
        ZEN_VM_PROOF = var.vm_proof
        # Submissions and stops must carry their sender's Google ID token (zen.adapters.submitters).
        ZEN_AUTH = var.submitter_auth
      },
      local.zen_config_shipped ? { ZEN_CONFIG = local.shipped_config_path } : {},
      # The tick makes each VM's control subscription and grants it to the account its VM runs as alone
      # (zen.adapters.control_subscriptions, iam.tf): cluster -> region -> agent service account.
      each.key == "on_scale_tick" ? { ZEN_AGENT_ACCOUNTS = local.agent_accounts_env } : {},
    )

    # The heartbeat function derives each VM's MAC key from this secret (zen.adapters.message_key): the agent
    # then authenticates its messages with an HMAC instead of an RSA signature (proof_secret.tf).
    dynamic "secret_environment_variables" {
      for_each = each.key == "on_heartbeat" ? [google_secret_manager_secret.proof.secret_id] : []
      content {
        key        = "ZEN_PROOF_SECRET"
        project_id = var.project_id
        secret     = secret_environment_variables.value
        version    = "latest"
      }
    }
  }

  event_trigger {
    trigger_region        = var.region
    event_type            = "google.cloud.pubsub.topic.v1.messagePublished"
    pubsub_topic          = google_pubsub_topic.zen[local.trigger_topics[each.key]].id
    service_account_email = google_service_account.function[each.key].email
    # A 5xx (database down: TransientError) is redelivered with backoff; bad messages are acked by
    # Zen itself. After max_delivery_attempts a message goes to the dead-letter topic. A failed tick
    # is dropped instead (local.functions: retry).
    retry_policy = each.value.retry ? "RETRY_POLICY_RETRY" : "RETRY_POLICY_DO_NOT_RETRY"
  }

  depends_on = [
    google_project_service.apis,
    terraform_data.proof_secret_version,
    google_secret_manager_secret_iam_member.heartbeat_reads_proof_secret,
    google_storage_bucket_iam_member.build_reads_source,
    google_project_iam_member.build_reads_gcf_sources,
    google_artifact_registry_repository_iam_member.build_writes_images,
    google_project_iam_member.build_logs,
  ]
}

# Eventarc owns its trigger subscriptions and its API cannot give them a dead-letter policy
# (hashicorp/terraform-provider-google#17697). This sets one, with exponential retry backoff, on
# each retried trigger's subscription through gcloud during apply, and lets the Pub/Sub service agent
# pull from it (to forward dead letters). Rerun whenever the trigger is recreated.
resource "terraform_data" "trigger_dead_letter" {
  for_each = var.attach_dead_letter_topics ? local.dead_lettered : {}

  triggers_replace = [
    google_cloudfunctions2_function.zen[each.key].event_trigger[0].trigger,
    google_pubsub_topic.dead_letter[each.key].id,
    var.max_delivery_attempts,
    var.functions[each.key].timeout_s,
  ]

  provisioner "local-exec" {
    command = "${path.module}/scripts/attach_dead_letter.sh"
    environment = {
      TRIGGER               = google_cloudfunctions2_function.zen[each.key].event_trigger[0].trigger
      DEAD_LETTER_TOPIC     = google_pubsub_topic.dead_letter[each.key].id
      MAX_DELIVERY_ATTEMPTS = tostring(var.max_delivery_attempts)
      PUBSUB_SERVICE_AGENT  = local.pubsub_service_agent
      ACK_DEADLINE_S        = tostring(min(600, max(10, var.functions[each.key].timeout_s)))
    }
  }

  depends_on = [google_pubsub_topic_iam_member.dead_letter_publisher]
}

# The scale tick: outbox resend, lost-job sweep, scaling. Ticks are interchangeable (the next one
# comes a minute later), so neither a failed publish nor a failed tick is retried.
resource "google_cloud_scheduler_job" "scale_tick" {
  name        = "${var.name_prefix}-scale-tick"
  region      = var.region
  description = "Publishes the Zen scale tick to ${local.topics["scale_tick"]}"
  schedule    = var.scale_tick_schedule
  time_zone   = "Etc/UTC"

  retry_config {
    retry_count = 0
  }

  pubsub_target {
    topic_name = google_pubsub_topic.zen["scale_tick"].id
    data       = base64encode(jsonencode({ version = 1, source = "cloud-scheduler" }))
  }

  depends_on = [google_project_service.apis]
}
