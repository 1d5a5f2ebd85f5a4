-- When Zen last heard the VM about a STOPPING job's attempt: its last report before the stop (the stop moves
-- last_heartbeat_at to the stop's time, from which its deadline counts), or since it. An attempt whose stop goes
-- unanswered is billed no later than this + heartbeat_timeout_s, as a silent attempt left alone is
-- (zen.core.lifecycle.decide_silence). NULL: a job not stopped since this was kept.
ALTER TABLE jobs ADD COLUMN heard_at timestamptz;
GRANT UPDATE (heard_at) ON jobs TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
