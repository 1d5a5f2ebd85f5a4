-- Several jobs per VM (issue 15, a cluster's max_jobs_per_vm): a VM heartbeat may name every attempt
-- the VM holds, and an attempt that shares its VM is charged its share of the VM's time.
ALTER TABLE vms ADD COLUMN jobs jsonb;  -- [{"job_id", "attempt"}, ...] from a VM that may hold several; else NULL
-- The attempt's share of its VM: its GPUs / the VM's GPUs (1 when it held the whole VM, as every
-- attempt did before). VM-seconds of an attempt are its wall time x this (zen.store.usage).
ALTER TABLE attempt_usage ADD COLUMN vm_share double precision NOT NULL DEFAULT 1
    CHECK (vm_share > 0 AND vm_share <= 1);
