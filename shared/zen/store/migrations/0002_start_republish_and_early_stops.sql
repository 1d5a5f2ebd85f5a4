-- When a job's start message was last published, so the tick can republish it for a job that has
-- sat QUEUED too long (a start message lost or expired must never strand a job).
ALTER TABLE jobs ADD COLUMN start_published_at timestamptz;
UPDATE jobs SET start_published_at = queued_at WHERE status = 'QUEUED';
CREATE INDEX jobs_queued_start ON jobs (start_published_at) WHERE status = 'QUEUED';

-- Stops that arrived before their job's submit (Pub/Sub does not order across topics): kept, and
-- applied when the submit arrives. Forgotten after a week, as Pub/Sub forgets undelivered messages.
CREATE TABLE early_stops (
    job_id       text PRIMARY KEY,
    reason       text NOT NULL,
    requested_at timestamptz NOT NULL
);
