-- The queued jobs (no gang node claimed) by what they ask of their cluster that a change of the configuration may
-- take away: the one provisioning model they accept (and, flex-start, the max_runtime_s they named), their nodes
-- (gangs alone), the regions they named (those that named some alone). The scale tick looks, before each scaling
-- pass, for those their cluster no longer serves (queued_jobs_unfit: zen.jobs.stranding) and holds them, rather
-- than leave them QUEUED with no VM ever asked for them; through these it reads no row while every queued job fits.
-- Built under the jobs table's lock: migrate in a quiet moment.
CREATE INDEX jobs_queued_models ON jobs (cluster, provisioning, named_max_runtime_s)
    WHERE status = 'QUEUED' AND gang IS NULL AND provisioning IS NOT NULL;
CREATE INDEX jobs_queued_nodes ON jobs (cluster, nodes) WHERE status = 'QUEUED' AND gang IS NULL AND nodes > 1;
CREATE INDEX jobs_queued_named_regions ON jobs (cluster, regions)
    WHERE status = 'QUEUED' AND gang IS NULL AND jsonb_typeof(request -> 'regions') = 'array';
