-- `zen stats` counts the status changes and lost attempts of its window (zen.store.stats: job_status_changes,
-- lost_attempts) and the scaling decisions of it (scaling_decisions): with no index on when a row was written,
-- each read every history row Zen ever kept (job_events gains a few rows a job and is never emptied), so the
-- command slowed with the months, not with its window. Both tables are only appended to: the index is written
-- once a row, at its right end.
CREATE INDEX job_events_at ON job_events (at);
CREATE INDEX scaling_decisions_at ON scaling_decisions (at);
