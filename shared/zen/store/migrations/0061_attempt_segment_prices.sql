-- An attempt is priced at the price kept with the billed segment of its VM its start falls in (migration 0056; zen.store
-- queries insert_attempt_usage), for a VM that has left its MIG too: the functions that end attempts read that column.
GRANT SELECT (usd_per_hour) ON vm_lifetimes TO zen_heartbeat, zen_ticker;
