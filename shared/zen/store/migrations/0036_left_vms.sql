-- The VMs that gave the current attempt up before it ran there (zen.core.lifecycle, zen.core.gang: a gang's
-- node leaving its assembly, given back, preempted or stopped; a claim whose VM went away before its answer),
-- each with the seq of the report that said so: a copy of one of its earlier claims, delivered late or again
-- (Pub/Sub is at-least-once and unordered), must not make it the attempt's holder (or a gang's node), which
-- would then be confirmed to a VM gone. Cleared at each new attempt.
ALTER TABLE jobs ADD COLUMN left_vms jsonb;
GRANT UPDATE (left_vms) ON jobs TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
