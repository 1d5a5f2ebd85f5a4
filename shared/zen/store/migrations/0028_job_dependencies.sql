-- Dependencies (zen.core.dependencies): a PENDING job held by `after` is found by the ids it names when one of
-- them ends.
CREATE INDEX jobs_waiting_after ON jobs USING gin ((request -> 'after')) WHERE status = 'PENDING' AND hold IS NOT NULL;
