-- Job arrays (zen.core.arrays, zen.jobs.arrays): a task's array, read from its request, and why a PENDING
-- job may not be admitted yet (`hold`: an array's max_parallel; NULL: it may). Admission reads only jobs
-- without a hold, so the queue's index says so. The generated column rewrites the jobs table once, under
-- its lock: migrate in a quiet moment.
ALTER TABLE jobs ADD COLUMN array_id text GENERATED ALWAYS AS (request -> 'array' ->> 'id') STORED;
ALTER TABLE jobs ADD COLUMN hold text;
CREATE INDEX jobs_by_array ON jobs (array_id, status) WHERE array_id IS NOT NULL;
DROP INDEX jobs_pending_by_queue;
CREATE INDEX jobs_pending_by_queue ON jobs (queue, cluster, priority DESC, submitted_at, job_id)
    WHERE status = 'PENDING' AND queue IS NOT NULL AND hold IS NULL;
