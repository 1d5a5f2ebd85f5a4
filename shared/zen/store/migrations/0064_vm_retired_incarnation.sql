-- Which VM of its name said RETIRED: the creation time its token gave (instance_creation_timestamp:
-- zen.core.incarnation) when its agent reported RETIRED (zen.store.queries vm_retired_as). A claim from that same VM
-- is refused whatever its seq (vm_retired_before): its agent, restarted without its retirement (a disk that did not
-- keep zen.agent.retired's mark, an older agent), claimed again on a VM retired for a fault. A VM its MIG recreates
-- has a later creation time and takes jobs. NULL: no RETIRED heard with a proven creation time (VM proof off).
ALTER TABLE vms ADD COLUMN retired_created_at timestamptz;
GRANT UPDATE (retired_created_at) ON vms TO zen_heartbeat;
