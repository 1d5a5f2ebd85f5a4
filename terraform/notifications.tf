# The notifier (functions/main.py on_job_event, zen.jobs.notifications): a fifth gen2 function, from the same
# archive, with its own service account and database user, fed by its own push subscription on zen-job-events,
# and the only principal of Zen's that reads notification secrets (docs/how-to/notifications.md).
#
# A push subscription rather than an Eventarc trigger: its filter lets through only the events that can be a
# notice (a job's end, a lost attempt, a queue's preemption: about one in six of a job's events), and terraform
# sets its dead-letter policy and retry backoff itself (an Eventarc trigger's subscription needs gcloud for both:
# functions.tf). functions-framework turns the push's Pub/Sub body into the same messagePublished CloudEvent.

locals {
  notifier_topic = local.topics["job_events"]
  # zen.core.notify.NOTICE_FILTER (a test holds the two equal).
  notifier_filter = "attributes.status = \"SUCCEEDED\" OR attributes.status = \"FAILED\" OR attributes.status = \"CANCELLED\" OR attributes.status = \"LOST\" OR attributes.type = \"job.preempted\""
  # The notifier reads only secrets whose name starts with this (the configuration's notifications.secret_prefix,
  # which a job's Slack or webhook target must match to be accepted).
  notify_secret_prefix = try(local.zen_config.notifications.secret_prefix, "zen-notify-")
  # One request holds one connection at a time (the job's row, then each delivery's claim and outcome, each its
  # own transaction, none held across a POST); a request finding them all in use waits for one (zen.store.db).
  notifier_db_max_open = 2
}

resource "google_service_account" "notifier" {
  account_id   = "${var.name_prefix}-fn-notify"
  display_name = "Zen function on_job_event (the notifier)"
  description  = "Runs the Zen notifier and is the identity its push subscription signs with; reads zen-notify-* secrets."

  depends_on = [google_project_service.apis]
}

# Left to the instance on destroy: db_grants_sql grants this user privileges on tables itself (not through a role),
# and Cloud SQL refuses to drop a PostgreSQL user that holds privileges, which stopped `terraform destroy`.
resource "google_sql_user" "notifier" {
  name            = trimsuffix(google_service_account.notifier.email, ".gserviceaccount.com")
  instance        = google_sql_database_instance.zen.name
  type            = "CLOUD_IAM_SERVICE_ACCOUNT"
  deletion_policy = "ABANDON"
}

resource "google_project_iam_member" "notifier_sql" {
  for_each = toset(["roles/cloudsql.client", "roles/cloudsql.instanceUser"])
  project  = var.project_id
  role     = each.value
  member   = "serviceAccount:${google_service_account.notifier.email}"

  condition {
    title       = "zen-sql-instance-only"
    description = "Only the Zen Cloud SQL instance"
    expression  = local.sql_condition
  }
}

# Users create their notification secrets (a Slack or webhook URL each) themselves, so no binding on each secret
# can exist beforehand: the role is granted on the project with a condition that limits it to the secrets named
# <prefix>* (and their versions). Secret Manager evaluates resource.name with the project's number.
resource "google_project_iam_member" "notifier_reads_notify_secrets" {
  project = var.project_id
  role    = "roles/secretmanager.secretAccessor"
  member  = "serviceAccount:${google_service_account.notifier.email}"

  condition {
    title       = "zen-notify-secrets-only"
    description = "Only secrets named ${local.notify_secret_prefix}*"
    expression  = "resource.name.startsWith(\"projects/${data.google_project.this.number}/secrets/${local.notify_secret_prefix}\")"
  }

  lifecycle {
    precondition { # a prefix the heartbeat function's proof secret starts with would let the notifier read it too
      condition     = local.notify_secret_prefix != "" && !startswith(google_secret_manager_secret.proof.secret_id, local.notify_secret_prefix)
      error_message = "notifications.secret_prefix must be non-empty and not a prefix of ${google_secret_manager_secret.proof.secret_id}: the notifier would read every secret it starts, the VM proof key among them."
    }
  }
}

resource "google_cloudfunctions2_function" "notifier" {
  name        = "${var.name_prefix}-on-job-event"
  location    = var.region
  description = "Zen notifier (functions/main.py on_job_event), pushed the notices of ${local.notifier_topic}"
  labels      = local.labels

  build_config {
    runtime           = "python311"
    entry_point       = "on_job_event"
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
    service_account_email            = google_service_account.notifier.email
    max_instance_count               = var.notifier.max_instances
    min_instance_count               = 0
    max_instance_request_concurrency = var.notifier.concurrency
    available_memory                 = var.notifier.memory
    available_cpu                    = var.notifier.cpu
    timeout_seconds                  = var.notifier.timeout_s
    # Pub/Sub's push requests from this project count as internal traffic: nothing else can call it.
    ingress_settings               = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision = true
    # Cloud SQL over its private IP; the endpoints (Slack, webhooks, the email API) over the internet.
    vpc_connector                 = google_vpc_access_connector.zen.id
    vpc_connector_egress_settings = "PRIVATE_RANGES_ONLY"

    environment_variables = merge(
      {
        ZEN_PROJECT            = var.project_id
        ZEN_CLOUDSQL_INSTANCE  = google_sql_database_instance.zen.connection_name
        ZEN_DB_USER            = google_sql_user.notifier.name
        ZEN_DB_NAME            = google_sql_database.zen.name
        ZEN_CLOUDSQL_IP_TYPE   = "PRIVATE"
        ZEN_DB_MAX_OPEN        = tostring(local.notifier_db_max_open)
        ZEN_DB_QUERY_TIMEOUT_S = tostring(max(5, var.notifier.timeout_s - 10))
        # The function's timeout: a transaction idle that long is ended (functions.tf).
        ZEN_FUNCTION_TIMEOUT_S = tostring(var.notifier.timeout_s)
        THREADS                = tostring(var.notifier.concurrency) # a thread a request sent at once (console.tf)
        ZEN_SCALING            = "off"                              # it never scales; it has no Compute permission
      },
      local.zen_config_shipped ? { ZEN_CONFIG = local.shipped_config_path } : {},
    )
  }

  lifecycle {
    precondition {
      condition     = local.db_connections_needed + var.notifier.max_instances * local.notifier_db_max_open + local.db_connections_reserved <= var.db_max_connections
      error_message = "The functions may open ${local.db_connections_needed} database connections and the notifier ${var.notifier.max_instances * local.notifier_db_max_open} (notifier.max_instances x ${local.notifier_db_max_open}), with ${local.db_connections_reserved} kept for superusers and people: more than db_max_connections (${var.db_max_connections}). Lower notifier.max_instances or the functions', or choose a larger db_tier."
    }
  }

  depends_on = [
    google_project_service.apis,
    google_storage_bucket_iam_member.build_reads_source,
    google_project_iam_member.build_reads_gcf_sources,
    google_artifact_registry_repository_iam_member.build_writes_images,
    google_project_iam_member.build_logs,
  ]
}

# The push subscription signs its requests as the notifier's account, which alone may invoke the service.
resource "google_cloud_run_service_iam_member" "notifier_invoker" {
  location = var.region
  service  = google_cloudfunctions2_function.notifier.name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.notifier.email}"
}

resource "google_service_account_iam_member" "notifier_pubsub_token_creator" {
  count              = var.grant_pubsub_token_creator ? 1 : 0
  service_account_id = google_service_account.notifier.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${local.pubsub_service_agent}"
}

# <topic>-dead-letter, as the other functions' (pubsub.tf): an event whose notices kept failing (an endpoint
# answering 5xx or not at all) lands here after max_delivery_attempts, kept a week for inspection or replay.
resource "google_pubsub_topic" "notifier_dead_letter" {
  name   = "${local.notifier_topic}-dead-letter"
  labels = local.labels

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_subscription" "notifier_dead_letter" {
  name                       = google_pubsub_topic.notifier_dead_letter.name
  topic                      = google_pubsub_topic.notifier_dead_letter.id
  message_retention_duration = "604800s"
  ack_deadline_seconds       = 60
  labels                     = local.labels

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_topic_iam_member" "notifier_dead_letter_publisher" {
  topic  = google_pubsub_topic.notifier_dead_letter.name
  role   = "roles/pubsub.publisher"
  member = "serviceAccount:${local.pubsub_service_agent}"
}

# Forwarding a dead letter means pulling it from the source subscription as the Pub/Sub service agent.
resource "google_pubsub_subscription_iam_member" "notifier_dead_letter_subscriber" {
  subscription = google_pubsub_subscription.notifier.name
  role         = "roles/pubsub.subscriber"
  member       = "serviceAccount:${local.pubsub_service_agent}"
}

resource "google_pubsub_subscription" "notifier" {
  name   = "${local.notifier_topic}-notifier"
  topic  = google_pubsub_topic.zen["job_events"].id
  filter = local.notifier_filter
  labels = local.labels
  # Push waits for the function's answer this long (its timeout); a slower answer would count as a failure.
  ack_deadline_seconds = min(600, max(10, var.notifier.timeout_s))

  push_config {
    push_endpoint = google_cloudfunctions2_function.notifier.service_config[0].uri
    oidc_token {
      service_account_email = google_service_account.notifier.email
      audience              = google_cloudfunctions2_function.notifier.service_config[0].uri
    }
  }

  # A failed delivery (the function raised: an endpoint timed out or answered 5xx) comes back with backoff, never
  # at once, and never blocks anything else: the scheduler published the event and moved on.
  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.notifier_dead_letter.id
    max_delivery_attempts = var.max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [google_pubsub_topic_iam_member.notifier_dead_letter_publisher, google_cloud_run_service_iam_member.notifier_invoker]
}
