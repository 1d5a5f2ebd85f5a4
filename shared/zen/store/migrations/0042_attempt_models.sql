-- An attempt's model is its VM's as the scaling passes first saw it (zen.store.queries insert_attempt_usage):
-- from its VM's name alone, an attempt on a primary pool's VM (whose name carries no model) took the cluster's
-- first model configured when it ended, so models reordered or dropped while it ran priced it at another. The
-- functions that end attempts read the model of a VM that has left its MIG too.
GRANT SELECT (model) ON vm_lifetimes TO zen_heartbeat, zen_ticker;
