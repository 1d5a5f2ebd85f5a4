# The Zen dashboard: one chart per operator question, in the order an operator asks them (is work
# waiting? how long do starts take? where are the VMs? which regions are out? is anything lost or
# refused? is the plumbing healthy?), and links to the logs of one job and of one VM. Dead letters: the retried
# triggers' and the notifier's (a FAILED or LOST job's notice dead-lettered never reaches its user).

locals {
  log_metric_type           = "metric.type=\"logging.googleapis.com/user/%s\" AND resource.type=\"cloud_run_revision\""
  dead_letter_subscriptions = join(", ", concat([for sub in google_pubsub_subscription.dead_letter : "\"${sub.name}\""], ["\"${google_pubsub_subscription.notifier_dead_letter.name}\""]))
  zen_services              = "resource.label.service_name=starts_with(\"${var.name_prefix}-on-\")"
  db_id                     = "${var.project_id}:${google_sql_database_instance.zen.name}"

  # Logs Explorer: replace JOB_ID / VM_NAME in the query box.
  job_scheduler_logs_query = "${local.zen_function_logs} AND jsonPayload.job_id=\"JOB_ID\""
  # One VM: Zen's lines about it, its agent's own warnings and errors (log zen-agent: the agent ships them, as no
  # logging agent ships its journal) and what GCE's guest environment logs of it (its startup script).
  vm_logs_query = "(${local.zen_function_logs} AND jsonPayload.vm=\"VM_NAME\") OR (logName=\"projects/${var.project_id}/logs/zen-agent\" AND labels.vm=\"VM_NAME\") OR (resource.type=\"gce_instance\" AND labels.\"compute.googleapis.com/resource_name\"=\"VM_NAME\")"
  logs_url      = "https://console.cloud.google.com/logs/query;query=%s?project=${var.project_id}"

  # title, then (metric filter, per-series aligner, cross-series reducer, group-by labels) per line.
  charts = [
    { title = "Jobs in flight by cluster and status", sets = [
      [format(local.log_metric_type, "zen_jobs"), "ALIGN_MEAN", "REDUCE_SUM", ["metric.label.cluster", "metric.label.status"]],
    ] },
    { title = "Oldest QUEUED job per cluster (s)", sets = [
      [format(local.log_metric_type, "zen_oldest_queued"), "ALIGN_MEAN", "REDUCE_MAX", ["metric.label.cluster"]],
    ] },
    { title = "Gangs waiting for their last node, per cluster", sets = [
      [format(local.log_metric_type, "zen_gangs_waiting"), "ALIGN_MEAN", "REDUCE_MAX", ["metric.label.cluster"]],
    ] },
    { title = "Time to start p50 / p95 per cluster and region (s)", sets = [
      [format(local.log_metric_type, "zen_time_to_start"), "ALIGN_DELTA", "REDUCE_PERCENTILE_50", ["metric.label.cluster", "metric.label.region"]],
      [format(local.log_metric_type, "zen_time_to_start"), "ALIGN_DELTA", "REDUCE_PERCENTILE_95", ["metric.label.cluster", "metric.label.region"]],
    ] },
    # Every scaling pass logs the fleet, in the tick's function and in submissions' (one series each):
    # the largest of them per (cluster, region, state), not their sum, which counted each VM twice.
    { title = "VMs per cluster, region and state", sets = [
      [format(local.log_metric_type, "zen_vms"), "ALIGN_MEAN", "REDUCE_MAX", ["metric.label.cluster", "metric.label.region", "metric.label.state"]],
    ] },
    { title = "Blocked (stocked-out) regions per cluster", sets = [
      [format(local.log_metric_type, "zen_region_blocked"), "ALIGN_MEAN", "REDUCE_MAX", ["metric.label.cluster", "metric.label.region"]],
    ] },
    { title = "Stockout / quota errors per region (per minute)", sets = [
      [format(local.log_metric_type, "zen_mig_errors"), "ALIGN_DELTA", "REDUCE_SUM", ["metric.label.region", "metric.label.kind"]],
    ] },
    { title = "Scaling decisions by action (per minute)", sets = [
      [format(local.log_metric_type, "zen_scaling_decisions"), "ALIGN_DELTA", "REDUCE_SUM", ["metric.label.action"]],
    ] },
    { title = "Job status changes by status (per minute)", sets = [
      [format(local.log_metric_type, "zen_job_status_changes"), "ALIGN_DELTA", "REDUCE_SUM", ["metric.label.status"]],
    ] },
    { title = "Lost attempts per cluster (per minute)", sets = [
      [format(local.log_metric_type, "zen_lost_attempts"), "ALIGN_DELTA", "REDUCE_SUM", ["metric.label.cluster"]],
    ] },
    { title = "Rejected messages by reason class (per minute)", sets = [
      [format(local.log_metric_type, "zen_rejected_messages"), "ALIGN_DELTA", "REDUCE_SUM", ["metric.label.reason_class"]],
    ] },
    { title = "Dead-lettered messages waiting, per topic", sets = [
      ["metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=one_of(${local.dead_letter_subscriptions})", "ALIGN_MAX", "REDUCE_SUM", ["resource.label.subscription_id"]],
    ] },
    { title = "Outbox: oldest unsent message (s) and scale ticks per minute", sets = [
      [format(local.log_metric_type, "zen_outbox_backlog_age"), "ALIGN_MEAN", "REDUCE_MAX", []],
      [format(local.log_metric_type, "zen_scale_ticks"), "ALIGN_DELTA", "REDUCE_SUM", []],
    ] },
    { title = "Function errors (5xx per minute) by function", sets = [
      ["metric.type=\"run.googleapis.com/request_count\" AND resource.type=\"cloud_run_revision\" AND ${local.zen_services} AND metric.label.response_code_class=\"5xx\"", "ALIGN_DELTA", "REDUCE_SUM", ["resource.label.service_name"]],
    ] },
    { title = "Function latency p95 by function (ms)", sets = [
      ["metric.type=\"run.googleapis.com/request_latencies\" AND resource.type=\"cloud_run_revision\" AND ${local.zen_services}", "ALIGN_DELTA", "REDUCE_PERCENTILE_95", ["resource.label.service_name"]],
    ] },
    { title = "Cloud SQL connections (limit ${var.db_max_connections})", sets = [
      ["metric.type=\"cloudsql.googleapis.com/database/postgresql/num_backends\" AND resource.type=\"cloudsql_database\" AND resource.label.database_id=\"${local.db_id}\"", "ALIGN_MEAN", "REDUCE_SUM", []],
    ] },
  ]

  links_text = join("\n", [
    "**Zen**: metrics come from the functions' structured logs (events in `shared/zen/telemetry.py`); `zen stats` shows the same figures locally. Runbooks: each alert's documentation, and docs/how-to/operate.md.",
    "",
    "- [Zen's log lines about one job](${format(local.logs_url, urlencode(local.job_scheduler_logs_query))}) (replace JOB_ID in the query; its own output: the job_logs_url output)",
    "- [Logs of one VM](${format(local.logs_url, urlencode(local.vm_logs_query))}) (replace VM_NAME: Zen's lines about it, its agent's warnings and errors, its startup script's lines)",
    "- [All Zen logs](${format(local.logs_url, urlencode(local.log_query))})",
  ])

  dashboard_tiles = concat(
    [{ xPos = 0, yPos = 0, width = 48, height = 8, widget = { title = "Where to look", text = { content = local.links_text, format = "MARKDOWN" } } }],
    [for i, chart in local.charts : {
      xPos   = (i % 2) * 24
      yPos   = 8 + floor(i / 2) * 16
      width  = 24
      height = 16
      widget = {
        title = chart.title
        xyChart = {
          dataSets = [for set in chart.sets : {
            plotType = "LINE"
            timeSeriesQuery = {
              timeSeriesFilter = {
                filter = set[0]
                aggregation = {
                  alignmentPeriod    = "60s"
                  perSeriesAligner   = set[1]
                  crossSeriesReducer = set[2]
                  groupByFields      = set[3]
                }
              }
            }
          }]
        }
      }
    }],
  )
}

resource "google_monitoring_dashboard" "zen" {
  dashboard_json = jsonencode({
    displayName  = "Zen"
    mosaicLayout = { columns = 48, tiles = local.dashboard_tiles }
  })

  depends_on = [google_project_service.apis, google_logging_metric.zen]
}
