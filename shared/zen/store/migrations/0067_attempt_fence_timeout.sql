-- The heartbeat_timeout_s the current attempt's agent computed its fence from, as its claim said (Heartbeat's
-- heartbeat_timeout_s; zen.core.lease.attempt_deadlines): the configuration it booted with, which may be longer than
-- the one Zen runs now after heartbeat_timeout_s was lowered. The lost-job sweep waits the longer of the two, so the
-- attempt is not run again while its VM, cut off from Zen, may still run it. A gang's nodes keep theirs in gang.
-- NULL: nothing stated (an agent from before it said so: the configuration's), or no attempt claimed since.
ALTER TABLE jobs ADD COLUMN fence_timeout_s double precision;
GRANT UPDATE (fence_timeout_s) ON jobs TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
