# Provider bounds: 6.8 has everything used here (gen2 functions with a build service account and
# Eventarc retry, MIG target shapes, Cloud SQL ssl_mode and connector enforcement, and the regional secrets'
# IAM resource, google_secret_manager_regional_secret_iam_member, of late 2024); 7.0 may rename
# arguments, so it stays out until this module has been checked against it.
terraform {
  # The state lives in a Cloud Storage bucket, so a team shares one (locked while one apply runs), not a
  # file on one laptop: `terraform init -backend-config="bucket=BUCKET" -backend-config="prefix=zen"`
  # (docs/how-to/deploy.md). A trial on one machine: a backend_override.tf with `backend "local" {}`.
  backend "gcs" {}

  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.8, < 7.0"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}

# The Billing Budgets API answers user credentials (`gcloud auth application-default login`) with a 403 unless
# the call names a project to bill it to: this provider names this one, for the budget alone (budget.tf). Whoever
# applies needs serviceusage.services.use on the project (Owner, or Service Usage Consumer).
provider "google" {
  alias                 = "budget"
  project               = var.project_id
  region                = var.region
  billing_project       = var.project_id
  user_project_override = true
}
