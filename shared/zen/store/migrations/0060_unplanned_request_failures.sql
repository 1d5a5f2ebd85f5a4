-- Failed flex-start resize requests a scaling pass read and then dropped unplanned (zen.scaling.reported): Compute
-- reports each once, to the read that deletes the request, so a tick whose pass was skipped (another held the
-- cluster) or read its MIGs again keeps them here. The cluster's next pass that reads the pool, on whichever
-- function instance it runs, plans with them and deletes them in the transaction that records its memory. They
-- were kept in the reading instance's memory: an instance that never ran the cluster's pass again lost them, and
-- the pool, never struck, was asked again and again.
CREATE TABLE unplanned_request_failures (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster  text NOT NULL,
    pool     text NOT NULL,         -- the pool key (zen.core.provisioning) whose MIG reported it
    failure  jsonb NOT NULL,        -- the MigError, as zen.scaling.fleetdb encodes it
    kept_at  timestamptz NOT NULL
);
CREATE INDEX unplanned_request_failures_cluster ON unplanned_request_failures (cluster);
-- The tick alone drops a read (it reads the MIGs before it takes a cluster's lock); any scaling pass plans them.
GRANT INSERT ON unplanned_request_failures TO zen_ticker;
GRANT USAGE ON SEQUENCE unplanned_request_failures_id_seq TO zen_ticker;
GRANT SELECT, DELETE ON unplanned_request_failures TO zen_submitter, zen_heartbeat, zen_ticker;
