-- Scaling: what the planner remembers per (cluster, region), when each MIG instance was first
-- seen (boot age), the VMs being scaled down (claims from them are refused), and every decision.

CREATE TABLE scaling_memory (
    cluster    text NOT NULL,
    region     text NOT NULL,
    memory     jsonb NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (cluster, region)
);

CREATE TABLE mig_instances (
    name          text PRIMARY KEY,
    cluster       text NOT NULL,
    region        text NOT NULL,
    first_seen_at timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL
);

CREATE TABLE vm_drains (
    name    text PRIMARY KEY,
    cluster text NOT NULL,
    region  text NOT NULL,
    at      timestamptz NOT NULL
);

CREATE TABLE scaling_decisions (
    id      bigserial PRIMARY KEY,
    at      timestamptz NOT NULL,
    cluster text NOT NULL,
    region  text,
    action  text NOT NULL,
    count   integer NOT NULL DEFAULT 0,
    vm      text,
    reason  text NOT NULL
);
CREATE INDEX scaling_decisions_cluster ON scaling_decisions (cluster, id);
