-- Start offers to warm VMs (issue 15, zen.routing): while start_vms is set, a QUEUED job's start goes
-- only to those VMs' own control subscriptions (their caches hold its inputs or image); start_regions
-- then holds their regions, so the planner's demand stays where they are. The tick widens it to the
-- region level once widen_at passes. NULL: the start goes to start subscriptions, as before.
ALTER TABLE jobs ADD COLUMN start_vms jsonb;

-- Routing offers a VM one start at a time: it asks whether a QUEUED job's offer names a VM already.
-- Few jobs wait on an offer at once (for data_wait_s at most), so this partial index stays small.
CREATE INDEX jobs_queued_offered ON jobs (cluster) WHERE status = 'QUEUED' AND start_vms IS NOT NULL;
