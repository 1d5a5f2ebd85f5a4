-- The reason of a user's stop (zen.core.lifecycle.decide_stop): a stop order sent again while the job
-- stops (to a VM still reporting the attempt) carries it, so the agent's last word on the job (its
-- message) keeps it. NULL until a user's stop, kept after it; a preemption's reason is preempted_by.
ALTER TABLE jobs ADD COLUMN stop_reason text;
GRANT UPDATE (stop_reason) ON jobs TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
