-- A MIG instance's VM is billed in segments: a preempted spot VM is recreated by its MIG under the same name,
-- and GCE bills nothing from its predecessor's end (TERMINATED) until the new VM is RUNNING, which may be
-- hours through a stockout; each new VM bears its own one-minute minimum. `billed_before` holds the segments
-- that ended while the instance stayed in its MIG ([running_at, last billed sight] pairs, oldest first);
-- `running_at` is the current segment's start, NULL between segments (zen.store.queries see_mig_instances).
-- Before this, the fleet's dollars (`zen usage --by region`) ran from the first RUNNING to the last sight.
ALTER TABLE mig_instances ADD COLUMN billed_before jsonb;
ALTER TABLE vm_lifetimes ADD COLUMN billed_before jsonb;
GRANT UPDATE (billed_before) ON mig_instances TO zen_submitter, zen_heartbeat, zen_ticker;
