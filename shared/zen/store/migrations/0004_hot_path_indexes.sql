-- Indexes that match the conditions the hot paths and the tick use (see tests/test_query_plans.py).

-- The lost-job sweep orders held jobs by their last sign of life.
DROP INDEX IF EXISTS jobs_held;
CREATE INDEX jobs_held_silence ON jobs ((COALESCE(last_heartbeat_at, updated_at)))
    WHERE status IN ('ASSIGNED','RUNNING','STOPPING');

-- The republish of unclaimed start messages orders QUEUED jobs by when their start went out.
DROP INDEX IF EXISTS jobs_queued_start;
CREATE INDEX jobs_queued_republish ON jobs ((COALESCE(start_published_at, queued_at))) WHERE status = 'QUEUED';

-- A scale-down asks whether a VM holds a job.
CREATE INDEX jobs_held_vm ON jobs (vm) WHERE status IN ('ASSIGNED','RUNNING','STOPPING');

-- The planner's arrival rate counts a cluster's recent submissions.
DROP INDEX IF EXISTS jobs_submitted_at;
CREATE INDEX jobs_cluster_submitted ON jobs (cluster, submitted_at);

-- Sent outbox rows are pruned by the tick, oldest first.
CREATE INDEX outbox_sent ON outbox (sent_at) WHERE sent_at IS NOT NULL;
