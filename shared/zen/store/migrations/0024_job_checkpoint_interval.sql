-- How often a job saves its work (its request's `checkpoint.every`, zen.core.checkpoints; NULL: it does not
-- checkpoint), in place of 0021's yes/no: the scaling tick's demand groups carry it, and the planner prices
-- a pool's preemptions by the job's own interval (zen.scaling.preemptions). 600 is CheckpointSpec.every's
-- default (a test checks that they agree). A generated column, filled by every path that writes a job and
-- grouped from the queued-demand index alone; adding it rewrites the jobs table once, under its lock:
-- migrate in a quiet moment.
ALTER TABLE jobs
    ADD COLUMN checkpoint_every_s integer GENERATED ALWAYS AS (
        CASE WHEN jsonb_typeof(request -> 'checkpoint') IS DISTINCT FROM 'object' THEN NULL
             WHEN jsonb_typeof(request -> 'checkpoint' -> 'every') = 'number'
                 THEN LEAST(GREATEST((request -> 'checkpoint' ->> 'every')::numeric, 1), 604800)::integer
             ELSE 600 END) STORED;
DROP INDEX jobs_queued_demand;
ALTER TABLE jobs DROP COLUMN checkpoints;
CREATE INDEX jobs_queued_demand ON jobs (cluster, priority, regions, start_regions, provisioning, max_start_wait_s,
                                         checkpoint_every_s, queued_at) WHERE status = 'QUEUED';
