-- Whether a job saves its work (its request's `checkpoint`: zen.core.checkpoints): the scaling tick's demand
-- groups say so, and the planner prices a pool's preemptions by it (zen.scaling.preemptions). A generated
-- column, filled by every path that writes a job, grouped from the queued-demand index alone. Adding it
-- rewrites the jobs table once, under its lock: migrate in a quiet moment.
ALTER TABLE jobs
    ADD COLUMN checkpoints boolean GENERATED ALWAYS AS (jsonb_typeof(request -> 'checkpoint') = 'object') STORED;
DROP INDEX jobs_queued_demand;
CREATE INDEX jobs_queued_demand ON jobs (cluster, priority, regions, start_regions, provisioning, max_start_wait_s,
                                         checkpoints, queued_at) WHERE status = 'QUEUED';
