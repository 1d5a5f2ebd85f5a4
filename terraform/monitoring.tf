# Operating Zen from the Cloud Console: log-based metrics over the functions' structured logs, one
# dashboard, and alert policies with a short runbook each (docs/how-to/operate.md).
#
# The events and fields are defined once, in shared/zen/telemetry.py; `zen stats` computes the same
# figures from Postgres under the same names. tests/terraform/test_monitoring.py runs the code,
# captures the lines it writes and checks every filter and extractor below against them.

locals {
  # Zen's own lines: what the four functions write to stderr (zen.logs; Cloud Logging parses each
  # JSON line into jsonPayload, its severity becomes the entry's severity), under the log names Cloud
  # Run gives a service's output. The agents' lines have log names of their own (zen-jobs: jobs'
  # output, zen.adapters.cloud_logging; the VM's system logs) on gce_instance: no metric or alert reads them.
  # This keeps apart what the agents write as they are written; it does not stop a VM that forges
  # entries: roles/logging.logWriter (logging.logEntries.create) is checked on the project, with no
  # IAM condition on a log's name or resource, so the agents' account may write any log name on any
  # monitored resource (iam.tf, agent_logs).
  zen_function_logs = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=~\"^${var.name_prefix}-on-\" AND logName=~\"/logs/run.googleapis.com%2F(stderr|stdout)$\""

  # One entry per log-based metric: the filter (after the functions' own), the label extractors,
  # and for a distribution the value extractor and unit (default "1"). Counters count matching lines.
  log_metrics = {
    zen_jobs = {
      description     = "Jobs per cluster in each status still in flight, sampled by every scale tick."
      filter          = "jsonPayload.event=\"jobs.count\""
      labels          = { cluster = "EXTRACT(jsonPayload.cluster)", status = "EXTRACT(jsonPayload.status)" }
      value_extractor = "EXTRACT(jsonPayload.count)"
    }
    zen_job_status_changes = {
      description = "Job status changes, by cluster, region and new status."
      filter      = "jsonPayload.event=\"job.status_changed\""
      labels      = { cluster = "EXTRACT(jsonPayload.cluster)", region = "EXTRACT(jsonPayload.region)", status = "EXTRACT(jsonPayload.to_status)" }
    }
    zen_time_to_start = {
      description     = "Seconds from submission to start (of any attempt), per cluster and region."
      filter          = "jsonPayload.event=\"job.status_changed\" AND jsonPayload.time_to_start_s>=0"
      labels          = { cluster = "EXTRACT(jsonPayload.cluster)", region = "EXTRACT(jsonPayload.region)" }
      value_extractor = "EXTRACT(jsonPayload.time_to_start_s)"
      unit            = "s"
    }
    zen_vms = {
      description     = "VMs per cluster and region by state (BOOTING, IDLE, BUSY, DELETING), sampled by every scaling pass."
      filter          = "jsonPayload.event=\"fleet.vms\""
      labels          = { cluster = "EXTRACT(jsonPayload.cluster)", region = "EXTRACT(jsonPayload.region)", state = "EXTRACT(jsonPayload.state)" }
      value_extractor = "EXTRACT(jsonPayload.count)"
    }
    zen_mig_errors = {
      description = "MIG instance-creation errors by cluster, region and kind (STOCKOUT, QUOTA, RATE_LIMIT, OTHER)."
      filter      = "jsonPayload.event=\"mig.error\" AND severity>=WARNING"
      labels      = { cluster = "EXTRACT(jsonPayload.cluster)", region = "EXTRACT(jsonPayload.region)", kind = "EXTRACT(jsonPayload.kind)" }
    }
    zen_region_blocked = {
      description     = "1 while a (cluster, region) is blocked after stockouts, 0 otherwise; per scaling pass."
      filter          = "jsonPayload.event=\"scaling.region\""
      labels          = { cluster = "EXTRACT(jsonPayload.cluster)", region = "EXTRACT(jsonPayload.region)" }
      value_extractor = "EXTRACT(jsonPayload.blocked)"
    }
    zen_cluster_stocked_out = {
      description     = "1 while every pool (region x model) of a cluster is blocked and jobs wait, 0 otherwise; per scaling pass."
      filter          = "jsonPayload.event=\"scaling.cluster\""
      labels          = { cluster = "EXTRACT(jsonPayload.cluster)" }
      value_extractor = "EXTRACT(jsonPayload.stocked_out)"
    }
    zen_oldest_queued = {
      description     = "Age in seconds of a cluster's oldest QUEUED job; per scaling pass."
      filter          = "jsonPayload.event=\"scaling.cluster\""
      labels          = { cluster = "EXTRACT(jsonPayload.cluster)" }
      value_extractor = "EXTRACT(jsonPayload.oldest_queued_s)"
      unit            = "s"
    }
    zen_scaling_decisions = {
      description = "Scaling decisions by cluster, region and action (ADD, DELETE, BLOCK, UNBLOCK, HOLD; ERROR: a pass that failed)."
      filter      = "jsonPayload.event=\"scaling.decision\""
      labels      = { cluster = "EXTRACT(jsonPayload.cluster)", region = "EXTRACT(jsonPayload.region)", action = "EXTRACT(jsonPayload.action)" }
    }
    zen_rejected_messages = {
      description = "Rejected messages by topic and reason class (malformed, unknown, forbidden, data)."
      filter      = "jsonPayload.event=\"message.rejected\" AND severity>=WARNING"
      labels      = { source = "EXTRACT(jsonPayload.source)", reason_class = "EXTRACT(jsonPayload.reason_class)" }
    }
    zen_lost_attempts = {
      description = "Job attempts whose VM went silent (LOST), by cluster and region."
      filter      = "jsonPayload.event=\"job.status_changed\" AND jsonPayload.to_status=\"LOST\""
      labels      = { cluster = "EXTRACT(jsonPayload.cluster)", region = "EXTRACT(jsonPayload.region)" }
    }
    zen_outbox_backlog_age = {
      description     = "Age in seconds of the oldest unsent outbox message; per scale tick."
      filter          = "jsonPayload.event=\"outbox.backlog\""
      value_extractor = "EXTRACT(jsonPayload.oldest_s)"
      unit            = "s"
    }
    zen_gangs_waiting = {
      description     = "Multi-node jobs waiting for their last node, per cluster; per scale tick."
      filter          = "jsonPayload.event=\"gangs.waiting\""
      labels          = { cluster = "EXTRACT(jsonPayload.cluster)" }
      value_extractor = "EXTRACT(jsonPayload.gangs)"
    }
    zen_scale_ticks = {
      description = "Scale ticks that ran to the end (outbox resend, lost-job sweep, scaling)."
      filter      = "jsonPayload.event=\"scale_tick.done\""
    }
  }
}

resource "google_logging_metric" "zen" {
  for_each    = local.log_metrics
  name        = each.key
  description = each.value.description
  filter      = "${local.zen_function_logs} AND ${each.value.filter}"

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = try(each.value.value_extractor, null) == null ? "INT64" : "DISTRIBUTION"
    unit         = try(each.value.unit, "1")
    display_name = "Zen ${each.key}"

    dynamic "labels" {
      for_each = try(each.value.labels, {})
      content {
        key         = labels.key
        value_type  = "STRING"
        description = "the line's ${labels.key}"
      }
    }
  }

  label_extractors = try(each.value.labels, {})
  value_extractor  = try(each.value.value_extractor, null)

  # Distributions: 1, 2, 4, ... about 12 days (seconds) or a million (counts); 0/1 flags fall in
  # the first buckets, and means are exact whatever the buckets.
  dynamic "bucket_options" {
    for_each = try(each.value.value_extractor, null) == null ? [] : [1]
    content {
      exponential_buckets {
        num_finite_buckets = 20
        growth_factor      = 2
        scale              = 1
      }
    }
  }

  depends_on = [google_project_service.apis]
}
