-- The queued single-VM jobs by priority, highest first, then oldest: what a claim reads to find a job of higher
-- priority than the one a VM claims that the VM could run instead (queued_jobs_outranking, zen.jobs.claims). Where
-- every job has one priority a claim reads no row of it. Built under the jobs table's lock: migrate in a quiet moment.
CREATE INDEX jobs_queued_priority ON jobs (cluster, priority DESC, queued_at, job_id)
    WHERE status = 'QUEUED' AND nodes = 1 AND gang IS NULL;
