-- The job lists' indexes order job ids in byte order (COLLATE "C"), as recent_jobs orders and pages them. A
-- viewer's reads (their own jobs, each of their queues') are merged in Python, whose string order is byte
-- order. Under the database's collation (Cloud SQL's default en_US.UTF8 sorts "eval-1" before "Train-1", and
-- "run_a" before "run-b": byte order, after), jobs of one submitted_at (tasks of two arrays submitted together)
-- came out of a read in another order than the merge's: a job listed twice on a page, or again on the next.
DROP INDEX IF EXISTS jobs_recent;
CREATE INDEX jobs_recent ON jobs (submitted_at DESC, job_id COLLATE "C" DESC);
DROP INDEX IF EXISTS jobs_owner_recent;
CREATE INDEX jobs_owner_recent ON jobs (lower(user_id), submitted_at DESC, job_id COLLATE "C" DESC);
DROP INDEX IF EXISTS jobs_queue_recent;
CREATE INDEX jobs_queue_recent ON jobs (queue, submitted_at DESC, job_id COLLATE "C" DESC) WHERE queue IS NOT NULL;
