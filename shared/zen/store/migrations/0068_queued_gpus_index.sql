-- The queued jobs by the GPUs they hold, per cluster: the scale tick looks, before each scaling pass, for those asking
-- more GPUs of one VM than their cluster's VMs have now (queued_jobs_gpus_above: its gpu_count lowered while they
-- waited), and holds them rather than have a VM booted for them that none of them may run on. A range on gpus above
-- the cluster's gpu_count reads no row while every queued job fits; through jobs_queued_demand it read every queued
-- job of the cluster at each tick. Built under the jobs table's lock: migrate in a quiet moment.
CREATE INDEX jobs_queued_gpus ON jobs (cluster, gpus) WHERE status = 'QUEUED' AND gang IS NULL;
