-- Zen's initial schema: jobs, their append-only history, the outbox, VMs, rejected messages.

CREATE TABLE jobs (
    job_id            text PRIMARY KEY,
    status            text NOT NULL CHECK (status IN
                        ('PENDING','QUEUED','ASSIGNED','RUNNING','STOPPING','SUCCEEDED','FAILED','CANCELLED','LOST')),
    attempt           integer NOT NULL CHECK (attempt >= 1),
    max_attempts      integer NOT NULL CHECK (max_attempts >= 1),
    cluster           text NOT NULL,
    user_id           text NOT NULL,
    priority          integer NOT NULL DEFAULT 0,
    regions           jsonb NOT NULL,          -- allowed regions, in the cluster's preference order
    request           jsonb NOT NULL,          -- the JobRequest as accepted
    request_hash      text NOT NULL,           -- to tell a redelivery from a conflicting reuse of job_id
    max_runtime_s     integer,
    region            text,
    zone              text,
    vm                text,                    -- the VM holding the current attempt
    last_seq          bigint NOT NULL DEFAULT 0,  -- highest heartbeat seq applied for this attempt
    last_heartbeat_at timestamptz,
    submitted_at      timestamptz NOT NULL,
    queued_at         timestamptz,
    started_at        timestamptz,
    finished_at       timestamptz,
    exit_code         integer,
    message           text,
    updated_at        timestamptz NOT NULL
);
CREATE INDEX jobs_cluster_status ON jobs (cluster, status);
CREATE INDEX jobs_submitted_at ON jobs (submitted_at);
-- The lost-job sweep only looks at jobs a VM holds.
CREATE INDEX jobs_held ON jobs (last_heartbeat_at) WHERE status IN ('ASSIGNED','RUNNING','STOPPING');

CREATE TABLE job_events (
    id          bigserial PRIMARY KEY,
    job_id      text NOT NULL REFERENCES jobs (job_id),
    at          timestamptz NOT NULL,
    actor       text NOT NULL,                 -- which handler (and VM) made the change
    attempt     integer NOT NULL,
    from_status text,
    to_status   text NOT NULL,
    reason      text NOT NULL
);
CREATE INDEX job_events_job ON job_events (job_id, id);

CREATE TABLE outbox (
    id               bigserial PRIMARY KEY,
    topic            text NOT NULL,            -- short topic name, e.g. zen-job-start
    data             bytea NOT NULL,
    attributes       jsonb NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL,
    sent_at          timestamptz,
    publish_attempts integer NOT NULL DEFAULT 0,
    last_error       text
);
CREATE INDEX outbox_unsent ON outbox (id) WHERE sent_at IS NULL;

CREATE TABLE vms (
    name         text PRIMARY KEY,
    cluster      text NOT NULL,
    region       text NOT NULL,
    zone         text NOT NULL,
    state        text NOT NULL CHECK (state IN ('IDLE','BUSY','STOPPING')),
    job_id       text,
    attempt      integer,
    last_seq     bigint NOT NULL DEFAULT 0,
    first_seen_at timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    idle_since   timestamptz
);
CREATE INDEX vms_cluster_region ON vms (cluster, region);

CREATE TABLE rejected_messages (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL,
    source      text NOT NULL,                 -- the function (topic) that received it
    message_id  text NOT NULL,
    job_id      text,
    reason      text NOT NULL,
    payload     text NOT NULL,                 -- at most the first 4 KiB, for a person to look at
    UNIQUE (source, message_id)                -- a redelivered bad message is recorded once
);
