# Alert policies, each with its runbook (the documentation every notification and incident shows).
# Thresholds are variables (monitoring_variables.tf); notifications go to var.notification_channels.

locals {
  metric = "metric.type=\"logging.googleapis.com/user/%s\" AND resource.type=\"cloud_run_revision\""

  threshold_alerts = {
    dead_letter = {
      name      = "a dead-letter subscription is not empty"
      filter    = "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=one_of(${local.dead_letter_subscriptions})"
      aligner   = "ALIGN_MAX", reducer = "REDUCE_MAX", group_by = ["resource.label.subscription_id"], period = "60s"
      threshold = 0, duration = "60s"
      runbook   = <<-EOT
        A function failed on a message ${var.max_delivery_attempts} times (it answered 5xx: the database was unreachable or refused, or a bug) and Pub/Sub moved it to `<topic>-dead-letter`. Zen never dead-letters a bad message itself (it rejects and acks those), so this is an infrastructure fault or a bug; on `zen-job-events-dead-letter` it may also be a notification endpoint that kept refusing (5xx, 429, no answer).
        1. Look at the function's errors around the first dead letter (dashboard: Function errors; Logs Explorer: severity>=ERROR).
        2. Inspect: `gcloud pubsub subscriptions pull <subscription> --limit=5` (without --auto-ack).
        3. Once the cause is fixed, replay: publish each message's data with its attributes to the original topic (`gcloud pubsub topics publish TOPIC --message=DATA --attribute=KEY=VALUE,...`: a message's proof of its sender is in them, and the notifier takes job events by their `status` and `type`), then ack them. Submissions and stops are idempotent by job_id, heartbeats by seq, job events by the notices already sent (other subscribers of the job events topic see them again); a submission or stop whose sender's token has expired since is refused: its user sends it again.
      EOT
    }
    lost_attempts = {
      name      = "job attempts are being lost"
      filter    = format(local.metric, "zen_lost_attempts")
      aligner   = "ALIGN_DELTA", reducer = "REDUCE_SUM", group_by = ["metric.label.cluster"], period = "600s"
      threshold = var.alert_lost_attempts, duration = "0s"
      runbook   = <<-EOT
        More than ${var.alert_lost_attempts} attempts of a cluster went LOST in 10 minutes: their VM stopped heartbeating (preempted spot VMs, crashed agents, or VMs that cannot reach Pub/Sub). Zen requeues them while attempts remain.
        1. Dashboard: which cluster and region; VMs per region by state (are VMs disappearing?).
        2. Logs of one lost job's VM (dashboard link, VM_NAME from `jsonPayload.vm`): did the agent report PREEMPTED, or go silent?
        3. Many preemptions in one region: prefer another region (reorder the cluster's `regions`) or standard VMs (its `provisioning`) in the Zen configuration, then apply it with terraform (docs/how-to/operate.md, Changing a cluster). Silent agents: check Cloud NAT and the agent's service account.
      EOT
    }
    stocked_out = {
      name      = "every pool of a cluster is stocked out while jobs wait"
      filter    = format(local.metric, "zen_cluster_stocked_out")
      aligner   = "ALIGN_MEAN", reducer = "REDUCE_MAX", group_by = ["metric.label.cluster"], period = "60s"
      threshold = 0.5, duration = "${var.alert_stockout_minutes * 60}s"
      runbook   = <<-EOT
        For ${var.alert_stockout_minutes} minutes every region of this cluster has been blocked after stockouts or quota errors, and jobs are queued. Zen keeps probing (a block lasts 3 to 15 minutes), so jobs start when capacity returns.
        1. Dashboard: Stockout / quota errors per region. QUOTA: request more GPU quota in those regions. STOCKOUT: Google has no capacity there now.
        2. To run sooner: add regions to the cluster's `regions` in the Zen configuration and apply it with terraform (docs/how-to/operate.md, Changing a cluster), or let waiting jobs use another cluster (resubmit with a different `cluster` or `gpu_type`).
        3. No stockout or quota error, and `zen explain CLUSTER` says VMs "got capacity and were never usable": the cluster's VMs start but their agent never speaks (the VM image, its startup script, the VMs' service account or network: a VM's serial port output). Zen then blocks the region (every region, once two gave such VMs) for longer and longer (up to 4 hours), trying one VM at a time; a region whose VM's agent is heard is asked as before again, and so are those that gave no such VM.
      EOT
    }
    oldest_queued = {
      name      = "the oldest QUEUED job is waiting too long"
      filter    = format(local.metric, "zen_oldest_queued")
      aligner   = "ALIGN_MEAN", reducer = "REDUCE_MAX", group_by = ["metric.label.cluster"], period = "60s"
      threshold = var.alert_oldest_queued_minutes * 60, duration = "120s"
      runbook   = <<-EOT
        A cluster's oldest QUEUED job has waited more than ${var.alert_oldest_queued_minutes} minutes.
        1. Dashboard: is the cluster stocked out (blocked regions, MIG errors)? At its VM limit (VMs per region by state all BUSY)? Is the tick running?
        2. `zen explain CLUSTER` (against the database) or the scaling decisions chart: HOLD says why demand is left unserved (limits, every region blocked).
        3. At the limit: raise `max_vms` / `max_vms_per_region` (configuration and terraform). VMs up but IDLE while jobs wait: their agents do not see the start messages (start subscription filter, agent logs).
        4. `zen explain` says "no VM can take it": the cluster changed while the job waited (its regions, models or limits); it waits for ever, no VM asked for it: stop it and submit it again, or change the cluster back.
      EOT
    }
    scaling_errors = {
      name      = "scaling passes of a cluster keep failing"
      filter    = "${format(local.metric, "zen_scaling_decisions")} AND metric.label.action=\"ERROR\""
      aligner   = "ALIGN_DELTA", reducer = "REDUCE_SUM", group_by = ["metric.label.cluster"], period = "600s"
      threshold = var.alert_scaling_errors, duration = "0s"
      runbook   = <<-EOT
        More than ${var.alert_scaling_errors} scaling passes of a cluster failed in 10 minutes (a failure is counted at most once a minute per function instance; one failed pass that the next tick's pass follows does not fire this). Until a pass succeeds, Zen asks no VM for queued jobs and deletes no idle VM (they keep billing); the scale tick itself still runs.
        1. `zen explain CLUSTER`: its ERROR decisions say what failed (`scaling pass failed: ...`). Logs Explorer: `jsonPayload.message="scaling pass failed"` gives each failure's traceback and its cluster (`jsonPayload.cluster`).
        2. Usual causes: the functions' Compute roles changed (terraform/iam.tf: apply terraform again), a MIG deleted or changed by hand (apply terraform again), the database refusing the pass's queries after an upgrade (`zen db migrate` from the release deployed).
      EOT
    }
    outbox = {
      name      = "the outbox is not draining"
      filter    = format(local.metric, "zen_outbox_backlog_age")
      aligner   = "ALIGN_MEAN", reducer = "REDUCE_MAX", group_by = [], period = "60s"
      threshold = var.alert_outbox_age_s, duration = "300s"
      runbook   = <<-EOT
        Messages Zen committed (job starts, VM orders, job events) have not been published for more than ${var.alert_outbox_age_s} s: publishing to Pub/Sub fails, so jobs are not started or stopped.
        1. Logs: the lines `jsonPayload.message:"outbox publish failed"` and `jsonPayload.message:"publish after commit failed"` give the error (`jsonPayload.error`).
        2. Usual causes: a topic deleted or renamed, the functions' publisher role removed (terraform/iam.tf), Pub/Sub quota. Fix it and the next tick resends everything (at least once).
      EOT
    }
    db_connections = {
      name      = "Cloud SQL is near its connection limit"
      filter    = "metric.type=\"cloudsql.googleapis.com/database/postgresql/num_backends\" AND resource.type=\"cloudsql_database\" AND resource.label.database_id=\"${local.db_id}\""
      aligner   = "ALIGN_MEAN", reducer = "REDUCE_SUM", group_by = [], period = "60s"
      threshold = var.db_max_connections * var.alert_db_connections_ratio, duration = "300s"
      runbook   = <<-EOT
        Cloud SQL has more than ${var.alert_db_connections_ratio * 100}% of its ${var.db_max_connections} connections in use. Past the limit, functions answer 500 and Pub/Sub redelivers (nothing is lost, but everything slows down).
        1. Dashboard: which function is busy (latency, errors); a burst of submissions or heartbeats scales their instances up.
        2. Lower `functions.*.max_instances` or `concurrency` (variables.tf: max_instances x ZEN_DB_MAX_OPEN bounds the functions' connections), or move to a larger `db_tier` and set `db_max_connections` to its limit.
      EOT
    }
  }
}

resource "google_monitoring_alert_policy" "zen" {
  for_each              = local.threshold_alerts
  display_name          = "Zen: ${each.value.name}"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  documentation {
    content   = each.value.runbook
    mime_type = "text/markdown"
  }

  conditions {
    display_name = each.value.name
    condition_threshold {
      filter          = each.value.filter
      comparison      = "COMPARISON_GT"
      threshold_value = each.value.threshold
      duration        = each.value.duration
      aggregations {
        alignment_period     = each.value.period
        per_series_aligner   = each.value.aligner
        cross_series_reducer = each.value.reducer
        group_by_fields      = each.value.group_by
      }
      trigger {
        count = 1
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis, google_logging_metric.zen]
}

resource "google_monitoring_alert_policy" "scale_tick_missing" {
  display_name          = "Zen: the scale tick is not running"
  combiner              = "OR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  documentation {
    content   = <<-EOT
      No scale tick has completed for ${var.alert_tick_missing_minutes} minutes. Without it nothing resends the outbox, nothing notices lost jobs, and nothing scales VMs up at the tick or down at all (idle VMs keep billing).
      1. Cloud Scheduler job `${google_cloud_scheduler_job.scale_tick.name}`: paused, or failing to publish?
      2. Function `${var.name_prefix}-on-scale-tick`: errors or timeouts in its logs (a pass longer than its timeout never logs `scale_tick.done`).
      3. `another scale tick holds the lock; skipping` on every tick: a session holds the advisory lock; find it in `pg_locks` and end it.
    EOT
    mime_type = "text/markdown"
  }

  conditions {
    display_name = "no scale_tick.done line"
    condition_absent {
      filter   = format(local.metric, google_logging_metric.zen["zen_scale_ticks"].name)
      duration = "${var.alert_tick_missing_minutes * 60}s"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}
