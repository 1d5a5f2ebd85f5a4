-- The tick's demand per cluster (queued_demand: count by priority and allowed regions) read from an
-- index alone, in group order, without touching the rows.
CREATE INDEX jobs_queued_demand ON jobs (cluster, priority, regions, queued_at) WHERE status = 'QUEUED';
