-- A VM's claim of a job a stop is kept for applies that stop first (zen.jobs.sweeps.JobSweeps.before_claim: a stop
-- and its job's submission that crossed, each committed before seeing the other's row): the heartbeat function
-- reads the kept stops and takes the one it applies, as the submission and the tick do (0030_function_roles).
GRANT SELECT, DELETE ON early_stops TO zen_heartbeat;
