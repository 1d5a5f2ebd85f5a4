# Cloud SQL for PostgreSQL: the job store. Reached only through the Cloud SQL connectors (the
# functions use cloud-sql-python-connector, see zen.store.db) with IAM database authentication:
# no passwords anywhere in Zen. Private IP by default; see var.db_public_ip.
#
# The schema is not created here: `zen db migrate` runs at deploy time (docs/how-to/deploy.md), never
# on a function's cold start.

# Database connections: every instance of every function at its bound must fit in max_connections,
# or requests past the limit fail (Pub/Sub redelivers, everything slows down, operators are locked out).
# Cloud Run may pass max_instances for a moment (a spike, a deploy's old instances finishing their requests): the
# connections kept for people take a small overshoot first; past them Postgres refuses the connect (SQLSTATE 53300),
# a transient error (zen.store.db: 500, redelivered).
locals {
  # What one request holds at once (tests/terraform/test_terraform_db_connections.py measures it): a
  # submission that scales, or a heartbeat whose VM became usable (it runs a pass), holds its cluster's
  # lock session and a transaction (zen.scaling.fleetdb); the tick its own lock session, a cluster's
  # lock session and a transaction; a stop one transaction at a time.
  db_connections_per_request = {
    on_job_submitted  = 2
    on_heartbeat      = 2
    on_stop_requested = 1
    on_scale_tick     = 3
  }
  # ZEN_DB_MAX_OPEN of each function: concurrency requests at once, plus the instance's one background
  # thread that marks published outbox rows (zen.jobs.messaging.SentMarks). zen.store.db.Database opens no
  # more; a request that finds them all in use waits at most 10 s, then answers 500 (a redelivery).
  db_max_open = {
    for name, f in var.functions : name => local.db_connections_per_request[name] * f.concurrency + 1
  }
  db_connections_needed = sum([for name, f in var.functions : f.max_instances * local.db_max_open[name]])
  # Left for others: Postgres keeps 3 for superusers (superuser_reserved_connections), and people
  # connect too (`zen db migrate` and db_grants_sql as postgres, db_admin_users, db_reader_users).
  db_connections_reserved = 10
}

locals {
  # What the instance allows: this module sets no max_connections flag, so Cloud SQL's default for the tier's memory
  # (Cloud SQL for PostgreSQL quotas and limits, "Maximum concurrent connections": 0.6 GiB 25, 1.7 GiB 50, 3.75 up to
  # 6 GiB 100, 6 up to 7.5 GiB 200, 7.5 up to 15 GiB 400, 15 up to 30 GiB 500, 30 up to 60 GiB 600, 60 up to 120 GiB
  # 800, 120 GiB and above 1,000). db_max_connections above it passed the plan's connection check (and set the
  # connection alert past the limit) while Postgres refused the connections over it. null: a tier not read here.
  db_tier_memory_gib = try(
    { "db-f1-micro" = 0.6, "db-g1-small" = 1.7 }[var.db_tier],
    tonumber(regex("^db-custom-[0-9]+-([0-9]+)$", var.db_tier)[0]) / 1024,
    null,
  )
  db_tier_max_connections = try([
    for step in [[120, 1000], [60, 800], [30, 600], [15, 500], [7.5, 400], [6, 200], [3.75, 100], [1.7, 50], [0, 25]] :
    step[1] if local.db_tier_memory_gib >= step[0]
  ][0], null)
}

resource "google_sql_database_instance" "zen" {
  name                = "${var.name_prefix}-db"
  database_version    = "POSTGRES_16" # the version the tests run against (pgserver)
  region              = var.region
  deletion_protection = var.db_deletion_protection

  settings {
    tier                        = var.db_tier
    edition                     = "ENTERPRISE"
    availability_type           = var.db_availability_type
    disk_type                   = "PD_SSD"
    disk_autoresize             = true
    deletion_protection_enabled = var.db_deletion_protection
    # Only the Cloud SQL connectors and Auth Proxy may connect (mTLS with ephemeral certificates
    # bound to an IAM identity), even from inside the VPC.
    connector_enforcement = "REQUIRED"
    user_labels           = local.labels

    database_flags {
      name  = "cloudsql.iam_authentication"
      value = "on"
    }
    database_flags {
      name  = "log_checkpoints"
      value = "on"
    }
    database_flags {
      name  = "log_connections"
      value = "on"
    }
    database_flags {
      name  = "log_disconnections"
      value = "on"
    }
    database_flags {
      name  = "log_lock_waits"
      value = "on"
    }
    database_flags {
      name  = "log_min_messages"
      value = "error"
    }
    database_flags {
      name  = "log_min_error_statement"
      value = "error"
    }
    database_flags {
      name  = "log_hostname"
      value = "on"
    }
    # Schema changes only (migrations): every statement would log each heartbeat.
    database_flags {
      name  = "log_statement"
      value = "ddl"
    }
    database_flags {
      name  = "log_temp_files"
      value = "0"
    }
    database_flags {
      name  = "log_min_duration_statement"
      value = "-1"
    }
    # pgAudit: the flag loads it, db_grants_sql creates the extension (Cloud SQL does not let terraform
    # create it), and pgaudit.log says what to audit: its default is none, i.e. nothing. Schema changes
    # and privilege changes (CREATE/ALTER/DROP, GRANT/REVOKE, roles): who changed the schema or gave
    # whom access. Not read/write/all: every heartbeat writes, every `zen` read command reads, and
    # each statement would be a log entry (Cloud Logging volume and cost, disk while it ships).
    database_flags {
      name  = "cloudsql.enable_pgaudit"
      value = "on"
    }
    database_flags {
      name  = "pgaudit.log"
      value = "ddl,role"
    }

    backup_configuration {
      enabled                        = true
      point_in_time_recovery_enabled = true
      start_time                     = "03:00"
      transaction_log_retention_days = 7
      backup_retention_settings {
        retained_backups = 14
      }
    }

    ip_configuration {
      ipv4_enabled                                  = var.db_public_ip
      private_network                               = local.network_id
      enable_private_path_for_google_cloud_services = true
      ssl_mode                                      = "TRUSTED_CLIENT_CERTIFICATE_REQUIRED"
    }

    insights_config {
      query_insights_enabled = true
    }

    maintenance_window {
      day  = 7 # Sunday
      hour = 4
    }
  }

  lifecycle {
    precondition {
      condition     = local.db_connections_needed + local.db_connections_reserved <= var.db_max_connections
      error_message = "The functions may open ${local.db_connections_needed} database connections (max_instances x ZEN_DB_MAX_OPEN, per function: ${jsonencode(local.db_max_open)}), and ${local.db_connections_reserved} are kept for superusers and people: more than db_max_connections (${var.db_max_connections}). Lower functions.*.max_instances or concurrency, or choose a larger db_tier and set db_max_connections to its max_connections."
    }
    precondition {
      condition     = var.db_max_connections <= coalesce(local.db_tier_max_connections, var.db_max_connections) # null: no check
      error_message = "db_max_connections (${var.db_max_connections}) is above the ${coalesce(local.db_tier_max_connections, 0)} connections Cloud SQL gives db_tier ${var.db_tier} (its memory's default max_connections): the plan's connection check would count on connections Postgres refuses. Set db_max_connections to ${coalesce(local.db_tier_max_connections, 0)} and fit the functions in it, or choose a larger db_tier."
    }
  }

  depends_on = [google_service_networking_connection.private_services, google_project_service.apis]
}

# Left to the instance on destroy: Cloud SQL refuses to delete a PostgreSQL database other roles hold privileges
# in (the functions' roles, zen_reader), which stopped `terraform destroy` before the instance; deleting the
# instance deletes it.
resource "google_sql_database" "zen" {
  name            = var.db_name
  instance        = google_sql_database_instance.zen.name
  deletion_policy = "ABANDON"
}

# One IAM database user per function service account. Cloud SQL names a service account's user by
# its e-mail without ".gserviceaccount.com": that is ZEN_DB_USER.
resource "google_sql_user" "functions" {
  for_each = google_service_account.function
  name     = trimsuffix(each.value.email, ".gserviceaccount.com")
  instance = google_sql_database_instance.zen.name
  type     = "CLOUD_IAM_SERVICE_ACCOUNT"
}

# Read-only users: `zen jobs ...` with their own Google identity (granted zen_reader by db_grants_sql). One listed in
# db_admin_users too has that list's user: one Cloud SQL user a name (a second of the same name fails the apply).
resource "google_sql_user" "readers" {
  for_each = setsubtract(toset(var.db_reader_users), toset(var.db_admin_users))
  name     = each.value
  instance = google_sql_database_instance.zen.name
  type     = "CLOUD_IAM_USER"
}

resource "google_sql_user" "admins" {
  for_each = toset(var.db_admin_users)
  name     = each.value
  instance = google_sql_database_instance.zen.name
  type     = "CLOUD_IAM_USER"
}
