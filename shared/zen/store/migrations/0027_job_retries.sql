-- Retries after failed exits (zen.core.retries): how many a job made, and until when a retry's backoff holds
-- it PENDING (with `hold` saying why; the tick lets it go when due: name retry_due).
ALTER TABLE jobs ADD COLUMN retries integer NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN hold_until timestamptz;
CREATE INDEX jobs_retry_due ON jobs (hold_until) WHERE status = 'PENDING' AND hold_until IS NOT NULL;
