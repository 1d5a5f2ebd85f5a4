-- Start routing (issue 15, zen.routing): a data job's start message first reaches only the regions
-- near its data (start_regions); the tick widens it to every allowed region once widen_at passes.
-- NULL start_regions: the start reaches every allowed region (the job's regions).
ALTER TABLE jobs ADD COLUMN start_regions jsonb;
ALTER TABLE jobs ADD COLUMN widen_at timestamptz;

-- The tick's widening finds narrowed QUEUED jobs whose wait is over, oldest first.
CREATE INDEX jobs_queued_widen ON jobs (widen_at) WHERE status = 'QUEUED' AND widen_at IS NOT NULL;

-- The planner's demand groups by the regions a job's start reaches now (narrowed or allowed), still
-- from the index alone.
DROP INDEX jobs_queued_demand;
CREATE INDEX jobs_queued_demand ON jobs (cluster, priority, regions, start_regions, queued_at) WHERE status = 'QUEUED';
