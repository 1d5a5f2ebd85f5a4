-- Who sent a refused message, and a kept stop (zen.adapters.submitters: the e-mail a submission's or a
-- stop's ID token proves; NULL where none was proven). A refusal names its sender for the audit trail;
-- a stop kept for a job not seen yet applies, once the job comes, only if its sender may stop it
-- (zen.jobs.authorization).
ALTER TABLE rejected_messages ADD COLUMN principal text;
ALTER TABLE early_stops ADD COLUMN principal text;
