-- The heartbeat path's probe (zen.jobs.probes): each scale tick publishes one on zen-heartbeats and the heartbeat
-- function notes when it hears it. A probe unheard past the fence's margin says reports Pub/Sub accepted wait
-- undelivered (an agent's fence, renewed by every accepted report, is still up): silences count afresh from then.
ALTER TABLE tick_clock ADD COLUMN probe_nonce text;
ALTER TABLE tick_clock ADD COLUMN probe_sent_at timestamptz;
ALTER TABLE tick_clock ADD COLUMN probe_heard_at timestamptz;
ALTER TABLE tick_clock ADD COLUMN probe_seen boolean NOT NULL DEFAULT false;
GRANT UPDATE (probe_nonce, probe_sent_at, probe_heard_at) ON tick_clock TO zen_ticker;
GRANT UPDATE (probe_heard_at, probe_seen, back_at) ON tick_clock TO zen_heartbeat;
