# The read-only web console (zen.console; functions/main.py `console`): an HTTP gen2 function from the same
# archive with its own service account and database user (granted zen_reader alone: db_grants_sql), reached
# only through an HTTPS load balancer whose backend is behind Identity-Aware Proxy. The console verifies
# IAP's signed header itself (ZEN_CONSOLE_IAP_AUDIENCE: this backend service), so a request that got round
# the proxy names no viewer. Created only when console_domain is set (docs/how-to/console.md).

locals {
  console = var.console_domain != ""
  # The console function's name: the function is given it, and the serverless endpoint group names it.
  console_function = "${var.name_prefix}-console"
  # IAP's signed header names the backend service it protects (zen.adapters.iap).
  console_audience  = local.console ? "/projects/${data.google_project.this.number}/global/backendServices/${google_compute_backend_service.console[0].generated_id}" : ""
  iap_service_agent = "service-${data.google_project.this.number}@gcp-sa-iap.iam.gserviceaccount.com"
}

resource "google_service_account" "console" {
  count        = local.console ? 1 : 0
  account_id   = "${var.name_prefix}-fn-console"
  display_name = "Zen web console"
  description  = "Runs the Zen web console: reads Postgres as zen_reader and the jobs' output in Cloud Logging."

  depends_on = [google_project_service.apis]
}

resource "google_sql_user" "console" {
  count    = local.console ? 1 : 0
  name     = trimsuffix(google_service_account.console[0].email, ".gserviceaccount.com")
  instance = google_sql_database_instance.zen.name
  type     = "CLOUD_IAM_SERVICE_ACCOUNT"
}

resource "google_project_iam_member" "console_sql" {
  for_each = local.console ? toset(["roles/cloudsql.client", "roles/cloudsql.instanceUser"]) : toset([])
  project  = var.project_id
  role     = each.value
  member   = "serviceAccount:${google_service_account.console[0].email}"

  condition {
    title       = "zen-sql-instance-only"
    description = "Only the Zen Cloud SQL instance"
    expression  = local.sql_condition
  }
}

# A job's page and the queues page show each job's `zen explain` line, whose data part looks up where each input's
# bucket is (zen.core.locality: storage.buckets.get) unless data.bucket_locations says: the role the functions have
# on each of agent_input_buckets (iam.tf: bucket metadata and object names, none of their contents). Refused, the
# console showed every job's data as "in buckets of unknown location, not priced".
resource "google_storage_bucket_iam_member" "console_locates_inputs" {
  for_each = local.console ? toset(var.agent_input_buckets) : toset([])
  bucket   = each.value
  role     = "roles/storage.legacyBucketReader"
  member   = "serviceAccount:${google_service_account.console[0].email}"
}

# A job's page streams its output from Cloud Logging, as `zen logs -f` reads it.
resource "google_project_iam_member" "console_reads_logs" {
  count   = local.console ? 1 : 0
  project = var.project_id
  role    = "roles/logging.viewer"
  member  = "serviceAccount:${google_service_account.console[0].email}"
}

resource "google_cloudfunctions2_function" "console" {
  count       = local.console ? 1 : 0
  name        = local.console_function
  location    = var.region
  description = "Zen web console (functions/main.py console), behind Identity-Aware Proxy at https://${var.console_domain}/"
  labels      = local.labels

  build_config {
    runtime           = "python311"
    entry_point       = "console"
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
    service_account_email            = google_service_account.console[0].email
    max_instance_count               = var.console.max_instances
    min_instance_count               = 0
    max_instance_request_concurrency = var.console.concurrency
    available_memory                 = var.console.memory
    available_cpu                    = var.console.cpu
    timeout_seconds                  = var.console.timeout_s
    # Only the load balancer (and so Identity-Aware Proxy) reaches it.
    ingress_settings               = "ALLOW_INTERNAL_AND_GCLB"
    all_traffic_on_latest_revision = true
    vpc_connector                  = google_vpc_access_connector.zen.id
    vpc_connector_egress_settings  = "PRIVATE_RANGES_ONLY"

    environment_variables = merge(
      {
        ZEN_PROJECT              = var.project_id
        ZEN_CLOUDSQL_INSTANCE    = google_sql_database_instance.zen.connection_name
        ZEN_DB_USER              = google_sql_user.console[0].name
        ZEN_DB_NAME              = google_sql_database.zen.name
        ZEN_CLOUDSQL_IP_TYPE     = "PRIVATE"
        ZEN_DB_MAX_OPEN          = tostring(var.console.db_max_open)
        ZEN_DB_QUERY_TIMEOUT_S   = tostring(max(5, var.console.timeout_s - 10))
        ZEN_FUNCTION_TIMEOUT_S   = tostring(var.console.timeout_s) # bounds a read left idle by a request cut at it
        ZEN_CONSOLE_IAP_AUDIENCE = local.console_audience
        # functions-framework's gunicorn serves 4 requests per vCPU at once unless THREADS says more: with
        # cpu = "1", 4 job pages' output streams (each held up to 5 minutes) left every other request of the
        # instance waiting, though Cloud Run sends it `concurrency` (16) at once.
        THREADS = tostring(var.console.concurrency)
      },
      local.zen_config_shipped ? { ZEN_CONFIG = local.shipped_config_path } : {},
    )
  }

  lifecycle {
    precondition {
      condition     = local.db_connections_needed + var.notifier.max_instances * local.notifier_db_max_open + var.console.max_instances * var.console.db_max_open + local.db_connections_reserved <= var.db_max_connections
      error_message = "The functions, the notifier and the console (console.max_instances x console.db_max_open = ${var.console.max_instances * var.console.db_max_open}) may open more database connections, with ${local.db_connections_reserved} kept for superusers and people, than db_max_connections (${var.db_max_connections}). Lower them, or choose a larger db_tier."
    }
    precondition {
      condition     = var.console_oauth_client_id != "" && var.console_oauth_client_secret != ""
      error_message = "console_domain is set: Identity-Aware Proxy needs console_oauth_client_id and console_oauth_client_secret."
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

# Identity-Aware Proxy forwards each request it lets through as its service agent: it alone may invoke the console.
resource "google_cloud_run_service_iam_member" "console_invoker" {
  count    = local.console ? 1 : 0
  location = var.region
  service  = google_cloudfunctions2_function.console[0].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${local.iap_service_agent}"

  depends_on = [google_project_service.apis, terraform_data.iap_service_agent]
}

# The agent named above exists only once made (scripts/iap_service_agent.sh: enabling the API does not make it).
resource "terraform_data" "iap_service_agent" {
  count            = local.console ? 1 : 0
  triggers_replace = [var.project_id]

  provisioner "local-exec" {
    command = "${path.module}/scripts/iap_service_agent.sh"
    environment = {
      PROJECT = var.project_id
    }
  }

  depends_on = [google_project_service.apis]
}

# -- the HTTPS load balancer in front, and IAP on its backend ---------------------------------------

# The group names the function by the name it is given (not google_cloudfunctions2_function.console's attribute): the
# function's ZEN_CONSOLE_IAP_AUDIENCE names the backend service, which names this group, so a reference back to the
# function closed a ring terraform refuses to plan (Error: Cycle; tests/terraform/test_terraform_no_cycle.py). A
# serverless group may name a function not deployed yet: requests reach it once it is.
resource "google_compute_region_network_endpoint_group" "console" {
  count                 = local.console ? 1 : 0
  name                  = "${var.name_prefix}-console"
  region                = var.region
  network_endpoint_type = "SERVERLESS"

  cloud_function {
    function = local.console_function
  }

  depends_on = [google_project_service.apis]
}

resource "google_compute_backend_service" "console" {
  count                 = local.console ? 1 : 0
  name                  = "${var.name_prefix}-console"
  description           = "The Zen web console, behind Identity-Aware Proxy"
  protocol              = "HTTPS"
  load_balancing_scheme = "EXTERNAL_MANAGED"

  backend {
    group = google_compute_region_network_endpoint_group.console[0].id
  }

  iap {
    enabled              = true
    oauth2_client_id     = var.console_oauth_client_id
    oauth2_client_secret = var.console_oauth_client_secret
  }

  log_config {
    enable      = true
    sample_rate = 1.0
  }

  depends_on = [google_project_service.apis]
}

resource "google_iap_web_backend_service_iam_member" "console_viewers" {
  for_each            = local.console ? toset(var.console_viewers) : toset([])
  project             = var.project_id
  web_backend_service = google_compute_backend_service.console[0].name
  role                = "roles/iap.httpsResourceAccessor"
  member              = each.value
}

resource "google_compute_url_map" "console" {
  count           = local.console ? 1 : 0
  name            = "${var.name_prefix}-console"
  default_service = google_compute_backend_service.console[0].id
}

resource "google_compute_managed_ssl_certificate" "console" {
  count = local.console ? 1 : 0
  name  = "${var.name_prefix}-console"

  managed {
    domains = [var.console_domain]
  }

  depends_on = [google_project_service.apis]
}

resource "google_compute_ssl_policy" "console" {
  count           = local.console ? 1 : 0
  name            = "${var.name_prefix}-console"
  profile         = "MODERN"
  min_tls_version = "TLS_1_2"

  depends_on = [google_project_service.apis]
}

resource "google_compute_target_https_proxy" "console" {
  count            = local.console ? 1 : 0
  name             = "${var.name_prefix}-console"
  url_map          = google_compute_url_map.console[0].id
  ssl_certificates = [google_compute_managed_ssl_certificate.console[0].id]
  ssl_policy       = google_compute_ssl_policy.console[0].id
}

resource "google_compute_global_address" "console" {
  count = local.console ? 1 : 0
  name  = "${var.name_prefix}-console"

  depends_on = [google_project_service.apis]
}

resource "google_compute_global_forwarding_rule" "console" {
  count                 = local.console ? 1 : 0
  name                  = "${var.name_prefix}-console"
  target                = google_compute_target_https_proxy.console[0].id
  ip_address            = google_compute_global_address.console[0].id
  port_range            = "443"
  load_balancing_scheme = "EXTERNAL_MANAGED"
}
