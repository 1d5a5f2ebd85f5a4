-- Multi-node jobs (gangs: zen.core.gang). nodes: the VMs a job runs on at once, from its request's `nodes`
-- (absent: 1), generated like checkpoints (0021) so every path that writes a job fills it; the scaling
-- tick's demand counts it (a gang of N is N VMs). gang: the current attempt's nodes as they claimed their
-- parts (rank, VM, region, zone, address, last report), NULL for an ordinary job and before the first
-- claim; written with the job's row under its lock, so a gang's claims are applied one at a time.
-- Adding the generated column rewrites the jobs table once, under its lock: migrate in a quiet moment.
ALTER TABLE jobs
    ADD COLUMN nodes integer GENERATED ALWAYS AS (COALESCE(CAST(request ->> 'nodes' AS integer), 1)) STORED,
    ADD COLUMN gang jsonb;
-- A gang's nodes hold their VMs (held_vms_of_cluster, vm_holds_job: never scaled down): found by cluster and by VM.
CREATE INDEX jobs_gangs ON jobs (cluster) WHERE gang IS NOT NULL AND status IN ('QUEUED','ASSIGNED','RUNNING','STOPPING');
CREATE INDEX jobs_gang_nodes ON jobs USING gin (gang jsonb_path_ops)
    WHERE gang IS NOT NULL AND status IN ('QUEUED','ASSIGNED','RUNNING','STOPPING');
-- A gang's attempt holds a VM per node: its usage counts them all (vm_share, 0011: the VMs' worth it held,
-- up to a gang's most nodes; below 1 still the share of a VM it shared).
ALTER TABLE attempt_usage DROP CONSTRAINT attempt_usage_vm_share_check;
ALTER TABLE attempt_usage ADD CONSTRAINT attempt_usage_vm_share_check CHECK (vm_share > 0 AND vm_share <= 64);
