-- How far the heartbeat path is known to deliver (zen.jobs.probes): the time the latest probe heard was sent (or
-- one the tick could not publish, judged as if prompt). The lost-job sweep counts an attempt's silence up to
-- then, not to now: a stall that began after the last probe came through (no tick has probed it yet), or a
-- steady backlog of the heartbeat function, holds no silence that Zen could not have heard. Before, a probe
-- heard late moved back_at, which held every silence for as long as the path stayed slow, a job on a dead VM
-- with it; the heartbeat function no longer moves back_at (its grant goes a release later: the code before
-- this one still sets it while an upgrade deploys).
ALTER TABLE tick_clock ADD COLUMN probe_vouched_at timestamptz;
UPDATE tick_clock SET probe_vouched_at = probe_sent_at WHERE probe_heard_at IS NOT NULL;
GRANT UPDATE (probe_vouched_at) ON tick_clock TO zen_ticker, zen_heartbeat;
