-- What the notifier (zen.jobs.notifications) delivered: one row per (job event, notification target), so a
-- redelivered event notifies no target twice once its delivery succeeded, a refusal (an endpoint's 4xx, a
-- secret the notifier may not read) is recorded and not retried, and two deliveries of one event at once do
-- not both send (claimed_until). Never a URL: `target` is the kind and the secret's name, or an address.
CREATE TABLE notifications (
    key           text PRIMARY KEY,        -- zen.core.notify.delivery_key: the event's identity and the target
    job_id        text NOT NULL,
    attempt       integer,
    event         text NOT NULL,           -- SUCCEEDED, FAILED, CANCELLED, PREEMPTED
    target        text NOT NULL,           -- "slack projects/P/secrets/S/versions/V", "email a@example.com"
    state         text NOT NULL CHECK (state IN ('sending', 'sent', 'refused', 'failed')),
    tries         integer NOT NULL DEFAULT 0,
    detail        text,                    -- the last answer: "HTTP 200", "HTTP 404", "no answer within 10 s"
    claimed_until timestamptz,             -- while 'sending': another delivery of the event waits until then
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);
CREATE INDEX notifications_of_job ON notifications (job_id);
CREATE INDEX notifications_updated ON notifications (updated_at);  -- the prune
