-- A VM its MIG recreates under the same name (a preempted spot VM, a repair) boots from the MIG's template then,
-- another model's after the cluster's models were reordered: a scaling pass records the model again when such a VM
-- starts a billed segment, and keeps each earlier segment's model as its third element in `billed_before`
-- (zen.store.queries see_mig_instances). The functions that run scaling passes update the column.
GRANT UPDATE (model) ON mig_instances TO zen_submitter, zen_heartbeat, zen_ticker;
