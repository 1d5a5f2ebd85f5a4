# Pub/Sub: the seven topics of the Zen configuration, dead-letter topics for the function triggers
# that are retried (all but the scale tick's), one filtered start subscription per (cluster, region), and pull subscriptions that keep
# what would otherwise be dropped (dead letters, job events).
#
# The functions' own trigger subscriptions are created and owned by Eventarc (functions.tf); the
# per-VM control subscriptions on zen-vm-control are made by the scale tick as the MIGs list their
# instances, each granted to its VM's agent account alone (iam.tf, zen.adapters.control_subscriptions).

locals {
  # Topic key (as in ZenConfig.topics) of the topic each function is triggered by.
  trigger_topics = {
    on_job_submitted  = "job_submitted"
    on_heartbeat      = "heartbeats"
    on_stop_requested = "job_stop"
    on_scale_tick     = "scale_tick"
  }
  # The triggers whose failed deliveries are retried, and dead-lettered after max_delivery_attempts
  # (functions.tf: a failed tick is dropped, so it has no dead-letter topic, and no alert fires for it).
  dead_lettered = { for name, topic in local.trigger_topics : name => topic if local.functions[name].retry }

  # Start messages wait in a start subscription until an agent of that (cluster, region) pulls
  # them. A job QUEUED and unclaimed for start_republish_s gets a fresh start message, so a copy
  # only needs to outlive one republish period: twice that, within Pub/Sub's 10 min..7 days
  # (start_republish_s is at most 6 days: a precondition on job_start, and Zen's own check at load).
  # Longer would only pile up stale copies, which agents then have to be told to RELEASE.
  start_retention_s = min(max(2 * local.start_republish_s, 600), 604800)
}

resource "google_pubsub_topic" "zen" {
  for_each = local.topics
  name     = each.value
  labels   = local.labels

  # Messages are consumed through subscriptions; the topics themselves keep nothing.
  depends_on = [google_project_service.apis]
}

# <topic>-dead-letter, the name the local bridge uses too. A message a function failed
# max_delivery_attempts times lands here instead of being retried forever or dropped.
resource "google_pubsub_topic" "dead_letter" {
  for_each = local.dead_lettered
  name     = "${local.topics[each.value]}-dead-letter"
  labels   = local.labels

  depends_on = [google_project_service.apis]
}

# A topic without a subscription drops what is published to it: keep dead letters for a week, for
# inspection (`gcloud pubsub subscriptions pull <topic>-dead-letter`) or replay.
resource "google_pubsub_subscription" "dead_letter" {
  for_each                   = local.dead_lettered
  name                       = google_pubsub_topic.dead_letter[each.key].name
  topic                      = google_pubsub_topic.dead_letter[each.key].id
  message_retention_duration = "604800s"
  ack_deadline_seconds       = 60
  labels                     = local.labels

  expiration_policy {
    ttl = "" # never expire, however long nothing is dead-lettered
  }
}

# zen-job-start-<cluster>-<region>: the agents of that (cluster, region) pull from it. The filter
# (ZenConfig.job_start_filter) lets through exactly the start messages of that cluster that allow
# this region, so an agent never sees a job it may not run.
resource "google_pubsub_subscription" "job_start" {
  for_each = local.start_subscriptions # one per (cluster, region): its pools' agents all pull from it
  name     = "${local.job_start_prefix}${each.value.cluster}-${each.value.region}"
  topic    = google_pubsub_topic.zen["job_start"].id
  filter   = "attributes.cluster = \"${each.value.cluster}\" AND (attributes:allow_any OR attributes:allow_${replace(each.value.region, "-", "_")})"

  # The agent leases a message for its own deadline as soon as it pulls it (and keeps extending it
  # while it waits for CONFIRM), so this only decides how soon a message held by a VM that died
  # right after pulling goes back to the others.
  ack_deadline_seconds       = 60
  message_retention_duration = "${local.start_retention_s}s"
  retain_acked_messages      = false
  labels                     = local.labels

  # A message given back (nack: no answer to a claim) is retried after a short backoff, not at once.
  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "60s"
  }

  # The default policy deletes a subscription after 31 days without pulls: a cluster unused for a
  # month would silently lose its start subscription.
  expiration_policy {
    ttl = ""
  }

  lifecycle {
    precondition { # kept twice start_republish_s: longer than 7 days, a copy expired before the next republish
      condition     = local.start_republish_s <= 518400
      error_message = "The Zen configuration's deadlines.start_republish_s (${local.start_republish_s}) is above 518400 (6 days): a start message is kept twice that, and Pub/Sub keeps one 7 days at most, so a queued job's start would expire before it is published again; set it at most 518400."
    }
  }
}

# Users follow their jobs on zen-job-events; this subscription keeps a day of events for
# `gcloud pubsub subscriptions pull` (a user's own subscriptions may filter on attributes).
resource "google_pubsub_subscription" "job_events" {
  name                       = "${local.topics["job_events"]}-all"
  topic                      = google_pubsub_topic.zen["job_events"].id
  message_retention_duration = "86400s"
  ack_deadline_seconds       = 30
  labels                     = local.labels

  expiration_policy {
    ttl = ""
  }
}
