-- A stop that comes before its job is kept per sender (zen.jobs.service): one kept for a job id by whoever sent
-- it first made the job's owner's own early stop a no-op (and the stranger's is refused when the job comes).
-- The job's first stop that its sender may give is applied; the others are noted.
ALTER TABLE early_stops DROP CONSTRAINT early_stops_pkey;
CREATE UNIQUE INDEX early_stops_job_sender ON early_stops (job_id, (COALESCE(principal, '')));
