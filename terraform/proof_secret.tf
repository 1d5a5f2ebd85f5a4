# The secret the heartbeat function derives each VM's MAC key from (ZEN_PROOF_SECRET: zen.adapters.message_key).
# Its value never passes through terraform (no secret in the state: sql.tf, "no passwords anywhere"):
# the first version is made by gcloud from /dev/urandom during apply, once (scripts/proof_secret.sh
# leaves an existing version alone). Rotation: add a version "<new>,<old>" (Zen seals with the first
# and accepts both), redeploy the function, and a day later (an agent MACs with a key for 12 hours at most,
# then signs until confirmed again) one with "<new>" alone.
resource "google_secret_manager_secret" "proof" {
  secret_id = "${var.name_prefix}-proof-secret"
  labels    = local.labels
  replication {
    auto {}
  }
  depends_on = [google_project_service.apis]
}

resource "terraform_data" "proof_secret_version" {
  triggers_replace = [google_secret_manager_secret.proof.id]

  provisioner "local-exec" {
    command = "${path.module}/scripts/proof_secret.sh"
    environment = {
      SECRET = google_secret_manager_secret.proof.id
    }
  }
}

# Only the heartbeat function answers claims (the CONFIRM carries the MAC key) and checks MACs.
resource "google_secret_manager_secret_iam_member" "heartbeat_reads_proof_secret" {
  secret_id = google_secret_manager_secret.proof.id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.function["on_heartbeat"].email}"
}
