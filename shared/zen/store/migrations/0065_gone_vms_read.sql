-- The tick reads the VMs passes saw leave their MIGs in the last day (zen.store.queries control_vms_gone): a new
-- function instance deletes their control subscriptions, which one before it made (zen.adapters.control_subscriptions).
GRANT SELECT (cluster, region, last_seen_at) ON vm_lifetimes TO zen_ticker;
