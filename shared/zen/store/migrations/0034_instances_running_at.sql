-- When a scaling pass first listed each MIG instance with a VM that GCE bills (status RUNNING, or past it:
-- zen.scaling.port.BILLED_STATUSES). The fleet's dollars (`zen usage --by region`) count from then: an
-- instance listed without a VM (CREATING through a stockout, a probe kept for a blocked pool) or still
-- provisioning costs nothing. NULL: not seen billed (yet). Rows from before keep what they were billed
-- from: their first sight.
ALTER TABLE mig_instances ADD COLUMN running_at timestamptz;
UPDATE mig_instances SET running_at = first_seen_at;
ALTER TABLE vm_lifetimes ADD COLUMN running_at timestamptz;
UPDATE vm_lifetimes SET running_at = first_seen_at;
GRANT UPDATE (running_at) ON mig_instances TO zen_submitter, zen_heartbeat, zen_ticker;
