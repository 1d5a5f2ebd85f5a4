# What a user needs after `terraform apply`: where to publish, how to submit and stop a job, where
# to look.

locals {
  example_cluster = local.clusters[0].name
  # The example job, for the shell: its id made unique per run (a fixed one ran nothing the second time)
  # and its user the gcloud account, whose ID token the message carries (zen_auth, cut at 1,000
  # characters as zen.adapters.submitters reads it back), as submitter_auth requires.
  example_job = "{\\\"job_id\\\":\\\"hello-$(date +%s)\\\",\\\"user_id\\\":\\\"$(gcloud config get-value account)\\\",\\\"cluster\\\":\\\"${local.example_cluster}\\\",\\\"image\\\":\\\"nvidia/cuda:12.4.1-base-ubuntu22.04\\\",\\\"command\\\":[\\\"nvidia-smi\\\"]}"
  # A service account's token must be for Zen's audience (zen.adapters.submitters): gcloud asked for it then.
  zen_audience = try(local.zen_config.auth.audience, null) != null ? local.zen_config.auth.audience : "zen:${var.project_id}"
  sender_proof = "case \"$(gcloud config get-value account)\" in *.gserviceaccount.com) F=--audiences=${local.zen_audience};; *) F=;; esac && T=$(gcloud auth print-identity-token $F) && A=\"zen_auth=$${T:0:1000}\" && { [ $${#T} -le 1000 ] || A=\"$A,zen_auth_1=$${T:1000}\"; }"
  log_query = join(" OR ", [
    "(resource.type=\"cloud_run_revision\" AND resource.labels.service_name=~\"^${var.name_prefix}-on-\")",
    "(resource.type=\"gce_instance\" AND labels.\"compute.googleapis.com/resource_name\"=~\"^zen-\")",
    "logName=\"projects/${var.project_id}/logs/zen-agent\"", # the agents' own warnings and errors
  ])
  # Job output: one entry per line the agent ships (zen.adapters.cloud_logging); replace JOB_ID with the job's id.
  job_logs_query = "logName=\"projects/${var.project_id}/logs/zen-jobs\" AND labels.job_id=\"JOB_ID\""
}

output "topics" {
  description = "Pub/Sub topic names by role (as in the Zen configuration)."
  value       = { for key, topic in google_pubsub_topic.zen : key => topic.name }
}

output "dead_letter_subscriptions" {
  description = "Where messages a function could not process end up (pull them to inspect)."
  value       = { for key, sub in google_pubsub_subscription.dead_letter : key => sub.name }
}

output "job_start_subscriptions" {
  description = "Start subscription of each (cluster, region), with its filter."
  value       = { for key, sub in google_pubsub_subscription.job_start : key => { name = sub.name, filter = sub.filter } }
}

output "migs" {
  description = "Regional MIG of each (cluster, region); Zen sets their size."
  value       = { for key, mig in google_compute_region_instance_group_manager.zen : key => { name = mig.name, region = mig.region } }
}

output "functions" {
  description = "The four Cloud Functions (gen2) by entry point."
  value       = { for key, fn in google_cloudfunctions2_function.zen : key => fn.name }
}

output "submit_job_command" {
  description = "Submit an example job (edit the JSON; see docs/reference/messages.md)."
  value       = "${local.sender_proof} && gcloud pubsub topics publish ${google_pubsub_topic.zen["job_submitted"].name} --project=${var.project_id} --attribute=\"$A\" --message=\"${local.example_job}\""
}

output "stop_job_command" {
  description = "Stop a job: set ID to its id first (ID=hello-...)."
  value       = "${local.sender_proof} && gcloud pubsub topics publish ${google_pubsub_topic.zen["job_stop"].name} --project=${var.project_id} --attribute=\"$A\" --message=\"{\\\"job_id\\\":\\\"$ID\\\",\\\"reason\\\":\\\"stopped by hand\\\"}\""
}

output "watch_job_events_command" {
  description = "Read job events (status changes, rejections)."
  value       = "gcloud pubsub subscriptions pull ${google_pubsub_subscription.job_events.name} --project=${var.project_id} --auto-ack --limit=20"
}

output "log_query" {
  description = "Cloud Logging query for the functions and the GPU VMs (paste into Logs Explorer)."
  value       = local.log_query
}

output "logs_explorer_url" {
  description = "Logs Explorer with the query above."
  value       = "https://console.cloud.google.com/logs/query;query=${urlencode(local.log_query)}?project=${var.project_id}"
}

output "job_logs_query" {
  description = "Cloud Logging query for one job's output (stdout/stderr of every attempt): replace JOB_ID; add AND labels.attempt=\"N\" for one attempt. `zen logs JOB` reads the same entries."
  value       = local.job_logs_query
}

output "job_logs_explorer_url" {
  description = "Logs Explorer with the job output query (replace JOB_ID in the query box)."
  value       = "https://console.cloud.google.com/logs/query;query=${urlencode(local.job_logs_query)}?project=${var.project_id}"
}

output "cloudsql_instance" {
  description = "Connection name for ZEN_CLOUDSQL_INSTANCE / the Cloud SQL Auth Proxy."
  value       = google_sql_database_instance.zen.connection_name
}

output "function_db_users" {
  description = "IAM database users of the functions (ZEN_DB_USER); each is made a member of its function's role after `zen db migrate` (db_grants_sql)."
  value       = { for key, user in google_sql_user.functions : key => user.name }
}

output "db_grants_sql" {
  description = "SQL to run as the schema owner (postgres) after the first `zen db migrate` (and again after adding db_reader_users, and after the upgrade that brings migration 0030: the functions' roles): IAM users start with no privileges on tables others create."
  value = join("\n", flatten([
    # pgAudit (sql.tf: the flags load it and say what it logs; the extension is created in SQL).
    "CREATE EXTENSION IF NOT EXISTS pgaudit;",
    # zen_reader: read-only, for people running the `zen` read commands (db_reader_users).
    "DO $$ BEGIN CREATE ROLE zen_reader NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;",
    "GRANT USAGE ON SCHEMA public TO zen_reader;",
    # Every table, whole, with two columns that hold each job's env: jobs.request and
    # rejected_messages.payload. Both stay readable: the read commands select them (`zen jobs
    # list/get/explain` and `zen watch` read `SELECT * FROM jobs`, and filter on request->'labels';
    # `zen rejected` selects payload). Hiding env from readers takes a code change first: queries
    # that name their columns and a request without env (or a view of it), then column grants here.
    "GRANT SELECT ON ALL TABLES IN SCHEMA public TO zen_reader;",
    # The outbox's bodies (data: start messages carry the whole request, env included) are no
    # reader's business: `zen stats` reads the backlog's count and age. Revoking the table privilege
    # first, then granting columns, keeps this idempotent (rerunning it re-grants the table above).
    "REVOKE SELECT ON outbox FROM zen_reader;",
    "GRANT SELECT (id, topic, created_at, sent_at, publish_attempts, last_error) ON outbox TO zen_reader;",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO zen_reader;",
    [for user in google_sql_user.readers : "GRANT zen_reader TO \"${user.name}\";"],
    [for email in setintersection(toset(var.db_reader_users), toset(var.db_admin_users)) :
    "GRANT zen_reader TO \"${google_sql_user.admins[email].name}\";"],
    # The web console (console.tf) reads as the read commands do, and nothing more.
    [for user in google_sql_user.console : "GRANT zen_reader TO \"${user.name}\";"],
    # Each core function's user: a member of its function's role alone (migration 0030 makes the roles and
    # grants them what each function's statements use; later migrations grant their tables to them). The
    # privileges an older db_grants_sql gave the user itself (every table, and default privileges on
    # tables to come) are taken back, in the same block: a role missing (`zen db migrate` not run yet)
    # fails the block whole, and the user keeps what it had.
    [for key, user in google_sql_user.functions : join(" ", [
      "DO $$ BEGIN",
      "GRANT ${local.functions[key].db_role} TO \"${user.name}\";",
      "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM \"${user.name}\";",
      "REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM \"${user.name}\";",
      "ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM \"${user.name}\";",
      "ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON SEQUENCES FROM \"${user.name}\";",
      "END $$;",
    ])],
    # The notifier (notifications.tf): the schema's version, the jobs it tells of, and its own ledger, nothing else.
    "GRANT USAGE ON SCHEMA public TO \"${google_sql_user.notifier.name}\";",
    "GRANT SELECT ON schema_migrations, jobs TO \"${google_sql_user.notifier.name}\";",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON notifications, notification_endpoints TO \"${google_sql_user.notifier.name}\";",
  ]))
}

output "agent_package" {
  description = "What the GPU VMs install (instance attribute zen-agent-package)."
  value       = local.agent_package
}

output "console_address" {
  description = "The IP address to point console_domain's DNS A record at (empty without a console)."
  value       = local.console ? google_compute_global_address.console[0].address : ""
}

output "console_url" {
  description = "The web console, once its certificate is provisioned (empty without a console)."
  value       = local.console ? "https://${var.console_domain}/" : ""
}
