-- How far the heartbeat path is known to deliver (zen.jobs.probes): the time the latest probe heard was sent (or
-- one the tick could not publish while the path was known good, judged as if prompt). The lost-job sweep counts
-- an attempt's silence up to then, not to now: a stall that began after the last probe came through (no tick has
-- probed it yet) holds every silence, and a steadily slow path only delays the verdict by its lag. Before, a
-- probe heard late moved back_at, which held every silence for as long as the path stayed slow, a job on a dead
-- VM with it; the heartbeat function no longer moves back_at (its grant goes a release later: the code before
-- this one still sets it while an upgrade deploys). A probe replaced unheard is kept as the previous one, so
-- that it still vouches if it comes through after all.
ALTER TABLE tick_clock ADD COLUMN probe_vouched_at timestamptz;
ALTER TABLE tick_clock ADD COLUMN probe_prev_nonce text;
ALTER TABLE tick_clock ADD COLUMN probe_prev_sent_at timestamptz;
-- A probe unheard as this runs vouches nothing yet: silences are held from the last tick, as after a gap.
UPDATE tick_clock SET probe_vouched_at = CASE WHEN probe_heard_at IS NOT NULL THEN probe_sent_at ELSE last_at END,
    back_at = CASE WHEN probe_heard_at IS NOT NULL THEN back_at ELSE GREATEST(back_at, last_at) END
WHERE probe_seen;
GRANT UPDATE (probe_vouched_at, probe_prev_nonce, probe_prev_sent_at) ON tick_clock TO zen_ticker, zen_heartbeat;
