-- Why a job is STOPPING on a user's request (zen.core.lifecycle.decide_stop): a stop order sent again while
-- it stops (to a VM still reporting the attempt) carries the user's reason, so the agent's last word on
-- the job (its message) keeps it. NULL until a user's stop (kept after it: why
-- the job was stopped); a preemption's reason is preempted_by.
ALTER TABLE jobs ADD COLUMN stop_reason text;
GRANT UPDATE (stop_reason) ON jobs TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
