-- The console's job list for a viewer who may not see every job (zen.store.repository.recent_jobs): their own
-- jobs, and each of their queues' jobs, each read newest first from an index entered at the page's keyset and
-- merged. One scan of jobs_recent filtering on "theirs or their queues'" walked every job above a page of a
-- viewer with few (60,000 rows for 2), every 2 s while a tab was open. Their columns never change after the
-- insert, so updates of a job stay HOT.
CREATE INDEX jobs_owner_recent ON jobs (lower(user_id), submitted_at DESC, job_id DESC);
CREATE INDEX jobs_queue_recent ON jobs (queue, submitted_at DESC, job_id DESC) WHERE queue IS NOT NULL;
