-- Accounting (zen.store.usage, `zen usage`): one row per attempt that held a VM, written in the
-- transaction that ends the attempt (succeeded, failed, stopped, lost, preempted). The primary key
-- makes a redelivered end message count once.
CREATE TABLE attempt_usage (
    job_id        text NOT NULL REFERENCES jobs (job_id),
    attempt       integer NOT NULL,
    user_id       text NOT NULL,
    queue         text,
    cluster       text NOT NULL,
    machine_type  text,                     -- the cluster's machine type when the attempt ended (priced by it)
    region        text,
    vm            text NOT NULL,
    gpus          integer NOT NULL,         -- GPUs of the VM, all held by the attempt
    started_at    timestamptz NOT NULL,     -- the VM took the attempt (its claim), or began running it
    ended_at      timestamptz NOT NULL,     -- Zen ended the attempt
    gpu_seconds   double precision NOT NULL CHECK (gpu_seconds >= 0),
    outcome       text NOT NULL CHECK (outcome IN ('SUCCEEDED','FAILED','STOPPED','LOST','PREEMPTED')),
    PRIMARY KEY (job_id, attempt)
);
-- `zen usage --since`: attempts that ended in the window.
CREATE INDEX attempt_usage_ended_at ON attempt_usage (ended_at);

-- Each MIG instance a scaling pass saw, kept when it leaves its MIG (its mig_instances row is then
-- deleted): with the instances still there, the fleet's VM-hours per region, boot and idle included.
CREATE TABLE vm_lifetimes (
    name          text NOT NULL,
    cluster       text NOT NULL,
    region        text NOT NULL,
    first_seen_at timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL,
    PRIMARY KEY (name, first_seen_at)
);
CREATE INDEX vm_lifetimes_last_seen_at ON vm_lifetimes (last_seen_at);
