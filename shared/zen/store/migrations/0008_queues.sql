-- Kueue-style queues (zen.queueing): a job's queue and the GPUs it holds while admitted, the usage
-- that fair sharing weighs, and indexes for the admission pass.
ALTER TABLE jobs ADD COLUMN queue text;
ALTER TABLE jobs ADD COLUMN gpus integer NOT NULL DEFAULT 0;
-- Set while a preempted job's VM stops it (it then goes back to PENDING); how often it was preempted.
ALTER TABLE jobs ADD COLUMN preempted_by text;
ALTER TABLE jobs ADD COLUMN preemptions integer NOT NULL DEFAULT 0;

-- A queue's waiting jobs of one cluster in admission order.
CREATE INDEX jobs_pending_by_queue ON jobs (queue, cluster, priority DESC, submitted_at, job_id)
    WHERE status = 'PENDING' AND queue IS NOT NULL;
-- GPUs admitted per queue: every status between admission and the end holds quota.
CREATE INDEX jobs_admitted_by_queue ON jobs (queue, cluster) INCLUDE (gpus)
    WHERE status IN ('QUEUED', 'ASSIGNED', 'RUNNING', 'STOPPING', 'LOST') AND queue IS NOT NULL;

-- Decayed GPU-seconds admitted per queue and cluster (fair sharing's "recent usage").
CREATE TABLE queue_usage (
    queue        text NOT NULL,
    cluster      text NOT NULL,
    gpu_seconds  double precision NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (queue, cluster)
);
