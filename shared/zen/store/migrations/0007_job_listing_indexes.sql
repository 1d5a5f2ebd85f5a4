-- What `zen jobs list` and `zen watch` read (see tests/test_query_plans.py): the newest jobs first,
-- optionally one user's, and the jobs still active.
CREATE INDEX jobs_recent ON jobs (submitted_at DESC, job_id DESC);
CREATE INDEX jobs_user_recent ON jobs (user_id, submitted_at DESC);
CREATE INDEX jobs_active ON jobs (submitted_at) WHERE status IN ('PENDING','QUEUED','ASSIGNED','RUNNING','STOPPING');
