-- An attempt takes the model of the last billed segment its VM began by the attempt's start (zen.store.queries
-- insert_attempt_usage), the current one's start included, for a VM that has left its MIG too: the functions that end
-- attempts read that column.
GRANT SELECT (running_at) ON vm_lifetimes TO zen_heartbeat, zen_ticker;
