# Jobs' checkpoints (zen.agent.checkpoint; docs/how-to/checkpoints.md): the bucket the configuration's
# checkpoints.bucket names, made here when it is set (none: jobs asking for a checkpoint are refused). Each
# cluster's agent accounts get Storage Object User on their own cluster's prefix only,
# gs://<bucket>/<prefix>/<cluster>/ (Cloud Storage honours object-name conditions): an agent restores and
# saves its jobs' checkpoints by name (the manifest LATEST.json names every file; nothing is listed), and
# overwrites the manifest and deletes a replaced save, which Object Creator could not.
locals {
  checkpoint_bucket = try(local.zen_config.checkpoints.bucket, null)
  checkpoint_prefix = try(local.zen_config.checkpoints.prefix, "checkpoints")
}

resource "google_storage_bucket" "checkpoints" {
  count                       = local.checkpoint_bucket == null ? 0 : 1
  name                        = local.checkpoint_bucket
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false
  labels                      = local.labels

  # The manifest is overwritten by every save: its version before is kept a day, to go back by hand.
  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 1
    }
    action {
      type = "Delete"
    }
  }

  # A finished job's checkpoint, and a save cut short before its manifest (nothing names it), end here.
  lifecycle_rule {
    condition {
      age = var.checkpoint_retention_days
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_storage_bucket_iam_member" "agent_keeps_checkpoints" {
  for_each = local.checkpoint_bucket == null ? {} : local.agent_accounts
  bucket   = google_storage_bucket.checkpoints[0].name
  role     = "roles/storage.objectUser"
  member   = "serviceAccount:${google_service_account.agent[each.key].email}"

  condition {
    title       = "zen-checkpoints-${each.value.cluster}"
    description = "Only the checkpoints of cluster ${each.value.cluster}'s jobs"
    expression  = "resource.name.startsWith(\"projects/_/buckets/${local.checkpoint_bucket}/objects/${local.checkpoint_prefix}/${each.value.cluster}/\")"
  }
}
