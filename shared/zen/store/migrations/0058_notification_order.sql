-- The event each notification is of (its zen-job-events payload, and its time): a job's notice to a target sends
-- the job's earlier notices to that target still unsent first (zen.jobs.notifications), so its end never reaches
-- a target before a preemption whose POST failed and waits for its event's redelivery. NULL in rows kept from
-- before: those are not sent again that way.
ALTER TABLE notifications ADD COLUMN at timestamptz;
ALTER TABLE notifications ADD COLUMN payload jsonb;
