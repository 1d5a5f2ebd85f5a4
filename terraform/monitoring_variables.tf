# Knobs of the operator's view (monitoring.tf): who is notified, and when each alert fires.

variable "notification_channels" {
  type        = list(string)
  default     = []
  description = "Cloud Monitoring notification channel ids (projects/P/notificationChannels/N) every Zen alert notifies. Empty: incidents open in the Console only."
}

variable "alert_stockout_minutes" {
  type        = number
  default     = 15
  description = "Alert when every region of a cluster has been blocked (stocked out) for this many minutes while jobs wait."
}

variable "alert_oldest_queued_minutes" {
  type        = number
  default     = 30
  description = "Alert when a cluster's oldest QUEUED job has waited longer than this many minutes."
}

variable "alert_lost_attempts" {
  type        = number
  default     = 2
  description = "Alert when more than this many job attempts are LOST (their VM went silent) within 10 minutes."
}

variable "alert_scaling_errors" {
  type        = number
  default     = 3
  description = "Alert when more than this many scaling passes of a cluster fail within 10 minutes (each failure is counted at most once a minute per function instance; a pass runs every scale tick)."
}

variable "alert_outbox_age_s" {
  type        = number
  default     = 600
  description = "Alert when the oldest unsent outbox message is older than this many seconds (the tick resends after 60 s)."
}

variable "alert_tick_missing_minutes" {
  type        = number
  default     = 10
  description = "Alert when no scale tick has completed for this many minutes (the scheduler publishes one a minute)."

  validation {
    condition     = var.alert_tick_missing_minutes >= 2
    error_message = "Cloud Monitoring needs an absence of at least 2 minutes."
  }
}

variable "db_max_connections" {
  type        = number
  default     = 100
  description = "max_connections of the Cloud SQL instance (100 for the default db_tier); the connection alert is a share of it. The plan fails when it is above what db_tier's memory gets (sql.tf: db-f1-micro 25, db-g1-small 50, db-custom-*: 100 from 3.75 GiB up to 1,000 from 120 GiB); a larger value needs a larger tier."
}

variable "alert_db_connections_ratio" {
  type        = number
  default     = 0.8
  description = "Alert when Cloud SQL's connections exceed this share of db_max_connections."

  validation {
    condition     = var.alert_db_connections_ratio > 0 && var.alert_db_connections_ratio <= 1
    error_message = "alert_db_connections_ratio is a share: above 0, at most 1."
  }
}

variable "function_request_logs" {
  type        = bool
  default     = false
  description = "Keep Cloud Run's request entries (log run.googleapis.com/requests) of every push a function answered: about 1 KB a heartbeat, some 120 GiB a month at 1,000 running jobs. False: they are excluded (terraform/logging.tf); those of failed pushes are kept either way."
}
