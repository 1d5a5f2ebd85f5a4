#!/usr/bin/env bash
# Give Zen's proof secret (proof_secret.tf) its first version: 48 random bytes, base64, made here and
# sent straight to Secret Manager, so the value is in no terraform state or plan. Idempotent: a secret
# that has an enabled version is left alone (rotation is by hand: proof_secret.tf).
#
# Environment:
#   SECRET  projects/P/secrets/S
set -euo pipefail

: "${SECRET:?}"
if [[ ! "$SECRET" =~ ^projects/([^/]+)/secrets/([^/]+)$ ]]; then
  echo "proof_secret: SECRET must look like projects/P/secrets/S, got '$SECRET'" >&2
  exit 2
fi
PROJECT="${BASH_REMATCH[1]}" NAME="${BASH_REMATCH[2]}"

if [[ -n "$(gcloud secrets versions list "$NAME" --project="$PROJECT" --filter='state=ENABLED' --limit=1 --format='value(name)')" ]]; then
  exit 0
fi
head -c 48 /dev/urandom | base64 | tr -d '\n' |
  gcloud secrets versions add "$NAME" --project="$PROJECT" --data-file=-
