-- The scale tick forgets the planner's memory of a pool the configuration no longer has (a region or a
-- provisioning model dropped from a cluster, a cluster removed): no pass plans such a pool again, and its
-- memory of VMs booting made every usable VM's heartbeat run a pass (zen.store.fleet.forget_dropped_pools).
GRANT DELETE ON scaling_memory TO zen_ticker;
