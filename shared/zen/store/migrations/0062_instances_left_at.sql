-- When a scaling pass saw an instance leave its MIG (zen.store.queries forget_vanished_instances): a silent job's VM
-- "left its MIG" since its last report only if a pass saw it go after that report (vm_stop_seen). NULL: forgotten
-- without being seen go, its pool dropped from the configuration while it ran (zen.store.fleet.forget_dropped_pools:
-- no pass lists that pool again), or kept before this column.
ALTER TABLE vm_lifetimes ADD COLUMN left_at timestamptz;
GRANT SELECT (left_at) ON vm_lifetimes TO zen_heartbeat, zen_ticker;
