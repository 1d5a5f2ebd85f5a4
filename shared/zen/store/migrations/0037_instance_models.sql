-- The provisioning model each MIG instance ran as, kept from its first sight (zen.store.fleet.see_instances)
-- and when it leaves its MIG (vm_lifetimes): read from its VM's name under the day's configuration, the
-- primary pool's instances (whose names carry no model) took the cluster's first model configured now, so
-- reordering a cluster's models repriced its past VMs in `zen usage --by region` (spot VM-hours at the
-- standard price). NULL for instances seen before this column: their name says, as before.
ALTER TABLE mig_instances ADD COLUMN model text;
ALTER TABLE vm_lifetimes ADD COLUMN model text;
