#!/usr/bin/env bash
# Make Identity-Aware Proxy's service agent (service-NUMBER@gcp-sa-iap.iam.gserviceaccount.com) before
# console.tf makes it the console's invoker: enabling iap.googleapis.com does not make it, and IAM refuses
# a binding that names a service account that does not exist yet. The GA google provider has no resource
# for it (google_project_service_identity is in google-beta alone), so gcloud makes it, as the IAP guide
# for Cloud Run does. Idempotent: an agent that exists is returned as it is.
#
# Environment:
#   PROJECT  the project id
set -euo pipefail

: "${PROJECT:?}"
gcloud beta services identity create --service=iap.googleapis.com --project="$PROJECT" --quiet
