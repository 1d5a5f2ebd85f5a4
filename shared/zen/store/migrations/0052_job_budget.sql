-- The attempts a job may lose: its max_attempts as submitted. max_attempts grows by one with each attempt that
-- spends none of them (a retry, a free preemption, a preemption by its queue, a gang retried as it did not
-- assemble), so a job FAILED with its budget spent tells the attempts it lost from the others by this
-- (zen.core.retries.budget_spent). Written once, by the insert (the submitter's INSERT grant covers it); NULL: a job
-- submitted before it was kept.
ALTER TABLE jobs ADD COLUMN budget integer;
