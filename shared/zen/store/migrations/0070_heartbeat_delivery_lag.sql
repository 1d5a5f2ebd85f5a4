-- The heartbeat path's delivery lag as the heartbeat function sees it on the reports that do get through
-- (zen.jobs.probes.heard_late): the largest recent one over LATE_DELIVERY_S, and when it was seen (the function's
-- clock). Written only by a report that late, and only when its lag is above the one kept or that one is half a
-- heartbeat timeout old; the lost-job sweep counts a silence only up to (now - that lag) for a heartbeat timeout
-- after it was seen, as well as up to the latest probe heard: a probe may pass at its first try while one attempt's
-- reports wait in Pub/Sub's backoff (the function at its instance limit answering some pushes 429).
ALTER TABLE tick_clock ADD COLUMN delivery_lag_s double precision;
ALTER TABLE tick_clock ADD COLUMN delivery_lag_at timestamptz;
GRANT UPDATE (delivery_lag_s, delivery_lag_at) ON tick_clock TO zen_heartbeat;
