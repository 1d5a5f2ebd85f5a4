-- An attempt is priced as the model of its VM's first billed segment lasting until its start or later (zen.store.queries
-- insert_attempt_usage), read from `billed_before` of a VM that has left its MIG too: the functions that end attempts
-- read that column.
GRANT SELECT (billed_before) ON vm_lifetimes TO zen_heartbeat, zen_ticker;
