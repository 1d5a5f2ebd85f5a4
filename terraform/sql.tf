# Cloud SQL for PostgreSQL: the job store. Reached only through the Cloud SQL connectors (the
# functions use cloud-sql-python-connector, see zen.store.db) with IAM database authentication:
# no passwords anywhere in Zen. Private IP by default; see var.db_public_ip.
#
# The schema is not created here: `zen db migrate` runs at deploy time (README, "Deploy"), never
# on a function's cold start.

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
    database_flags {
      name  = "cloudsql.enable_pgaudit"
      value = "on"
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

  depends_on = [google_service_networking_connection.private_services, google_project_service.apis]
}

resource "google_sql_database" "zen" {
  name     = var.db_name
  instance = google_sql_database_instance.zen.name
}

# One IAM database user per function service account. Cloud SQL names a service account's user by
# its e-mail without ".gserviceaccount.com": that is ZEN_DB_USER.
resource "google_sql_user" "functions" {
  for_each = google_service_account.function
  name     = trimsuffix(each.value.email, ".gserviceaccount.com")
  instance = google_sql_database_instance.zen.name
  type     = "CLOUD_IAM_SERVICE_ACCOUNT"
}

# Read-only users: `zen jobs ...` with their own Google identity (granted zen_reader by db_grants_sql).
resource "google_sql_user" "readers" {
  for_each = toset(var.db_reader_users)
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
