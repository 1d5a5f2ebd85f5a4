# What Cloud Logging ingests of the functions besides Zen's own lines (monitoring.tf reads those).
#
# Cloud Run writes one request entry (log run.googleapis.com/requests) for every push Eventarc makes to
# a function, about 1 KB each. Heartbeats are most of them: a job's every agent_heartbeat_s (30 s) and a
# VM's every vm_heartbeat_s (60 s), so 1,000 running jobs on 1,000 VMs make about 3,000 a minute, some
# 130 million entries and 120 GiB a month, billed past the project's free 50 GiB; Zen itself writes
# nothing for a heartbeat that changes no status (docs/reference/metrics.md, "Log volume"). The entries of
# the requests a function answered below 400 are excluded (never ingested, never billed); a push it
# failed (a 5xx, Eventarc redelivers it) keeps its entry. Cloud Run's request count and latency metrics
# (the dashboard's) do not come from these entries and are unchanged; the console's requests are kept.
locals {
  function_requests_answered = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=~\"^${var.name_prefix}-on-\" AND logName=~\"/logs/run.googleapis.com%2Frequests$\" AND httpRequest.status<400"
}

resource "google_logging_project_exclusion" "function_requests" {
  count       = var.function_request_logs ? 0 : 1
  name        = "${var.name_prefix}-function-requests"
  description = "Zen: the request entries of the pushes its functions answered (terraform/logging.tf)"
  filter      = local.function_requests_answered

  depends_on = [google_project_service.apis]
}
