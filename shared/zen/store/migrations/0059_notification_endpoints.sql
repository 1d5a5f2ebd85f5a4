-- The notifier's targets that gave no answer lately (zen.jobs.notifications): a POST to one timed out or found no
-- connection, so its notices are not POSTed until retry_at (each recorded failed at once, its event redelivered by
-- Pub/Sub), then by one delivery at a time (probe_until: that delivery's hold) until one gets an answer, which
-- deletes the row. One endpoint that hangs then holds one notifier request per while, not one per notice.
-- Never a URL: `endpoint` is a target's kind and secret name (the notifications table's `target`), or "email".
CREATE TABLE notification_endpoints (
    endpoint    text PRIMARY KEY,
    stalls      integer NOT NULL,      -- POSTs in a row that got no answer, each after the last while had passed
    retry_at    timestamptz NOT NULL,  -- no POST before then: 10 s after the first, doubling to 5 minutes
    probe_until timestamptz,           -- one delivery is trying it: the others wait until its answer, or then
    updated_at  timestamptz NOT NULL
);
CREATE INDEX notification_endpoints_updated ON notification_endpoints (updated_at);  -- the prune
