-- What a job accepts of its cluster's provisioning models (NULL: any) and how long it may wait for a
-- start (NULL: its cluster's max_start_wait_s), read from the request it was submitted with: generated
-- columns, so every path that writes a job fills them. The scaling tick's demand query groups by both
-- (zen.store.fleet.queued_demand), from the queued-demand index alone. Adding a stored generated column
-- rewrites the jobs table once, under its lock: migrate in a quiet moment.
ALTER TABLE jobs
    ADD COLUMN provisioning text GENERATED ALWAYS AS (request ->> 'provisioning') STORED,
    ADD COLUMN max_start_wait_s integer GENERATED ALWAYS AS (CAST(request ->> 'max_start_wait_s' AS integer)) STORED;
DROP INDEX jobs_queued_demand;
CREATE INDEX jobs_queued_demand ON jobs (cluster, priority, regions, start_regions, provisioning, max_start_wait_s,
                                         queued_at) WHERE status = 'QUEUED';
