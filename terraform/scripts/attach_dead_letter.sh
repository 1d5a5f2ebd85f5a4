#!/usr/bin/env bash
# Give the Pub/Sub subscription behind one Eventarc trigger a dead-letter topic, a retry backoff and an
# ack deadline as long as the function's timeout.
#
# Run by terraform (functions.tf, terraform_data.trigger_dead_letter) because the Eventarc API
# creates and owns that subscription and cannot configure either. Idempotent.
#
# Environment:
#   TRIGGER                projects/P/locations/L/triggers/T (the function's event_trigger.trigger)
#   DEAD_LETTER_TOPIC      projects/P/topics/<topic>-dead-letter
#   MAX_DELIVERY_ATTEMPTS  5..100
#   PUBSUB_SERVICE_AGENT   service-<number>@gcp-sa-pubsub.iam.gserviceaccount.com
#   ACK_DEADLINE_S         10..600: the function's timeout. Eventarc creates the subscription with 10 s,
#                          and push delivery waits for the answer only that long: a request still being
#                          served after 10 s was delivered again, and each such delivery counted
#                          toward MAX_DELIVERY_ATTEMPTS (a message served fine could be dead-lettered).
set -euo pipefail

: "${TRIGGER:?}" "${DEAD_LETTER_TOPIC:?}" "${MAX_DELIVERY_ATTEMPTS:?}" "${PUBSUB_SERVICE_AGENT:?}" "${ACK_DEADLINE_S:?}"

if [[ ! "$TRIGGER" =~ ^projects/([^/]+)/locations/([^/]+)/triggers/([^/]+)$ ]]; then
  echo "attach_dead_letter: TRIGGER must look like projects/P/locations/L/triggers/T, got '$TRIGGER'" >&2
  exit 2
fi
PROJECT="${BASH_REMATCH[1]}" LOCATION="${BASH_REMATCH[2]}" NAME="${BASH_REMATCH[3]}"

SUBSCRIPTION="$(gcloud eventarc triggers describe "$NAME" --project="$PROJECT" --location="$LOCATION" \
  --format='value(transport.pubsub.subscription)')"
if [[ -z "$SUBSCRIPTION" ]]; then
  echo "attach_dead_letter: trigger $TRIGGER has no Pub/Sub subscription (yet)" >&2
  exit 1
fi

gcloud pubsub subscriptions update "$SUBSCRIPTION" --project="$PROJECT" \
  --dead-letter-topic="$DEAD_LETTER_TOPIC" \
  --max-delivery-attempts="$MAX_DELIVERY_ATTEMPTS" \
  --min-retry-delay=10s --max-retry-delay=600s \
  --ack-deadline="$ACK_DEADLINE_S"

# Forwarding a dead letter means pulling it from this subscription as the Pub/Sub service agent.
gcloud pubsub subscriptions add-iam-policy-binding "$SUBSCRIPTION" --project="$PROJECT" \
  --member="serviceAccount:$PUBSUB_SERVICE_AGENT" --role=roles/pubsub.subscriber >/dev/null

echo "attach_dead_letter: $SUBSCRIPTION -> $DEAD_LETTER_TOPIC after $MAX_DELIVERY_ATTEMPTS attempts"
