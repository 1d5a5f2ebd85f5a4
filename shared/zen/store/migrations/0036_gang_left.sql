-- The VMs that left the current attempt's gang while it assembled (zen.core.gang.decide_given_back: given
-- back, preempted, stopped), each with the seq of the report that said so: a copy of one of its earlier
-- claims, delivered late or again (Pub/Sub is at-least-once and unordered), must not put it back in the gang,
-- which would then be confirmed to a VM gone. Cleared with the gang at each new attempt.
ALTER TABLE jobs ADD COLUMN gang_left jsonb;
GRANT UPDATE (gang_left) ON jobs TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
