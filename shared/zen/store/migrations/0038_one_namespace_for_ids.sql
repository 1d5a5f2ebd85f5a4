-- A job's id and an array's id are one namespace: no job (nor task) has an id an array has. Each row is
-- indexed by its job_id, but an array's task 0 by the array's id; a job X and an array X's task X-0 (or
-- array a's task a-1 and array a-1's task a-1-0) then collide here. Reads alone could not keep this: a job
-- and an array submitted at the same moment under one id each looked for the other before either committed,
-- and both were accepted (a stop of the array then stopped the job). An insert now waits for the other's
-- commit and inserts nothing (ON CONFLICT DO NOTHING); its caller refuses it with the reason.
CREATE UNIQUE INDEX jobs_one_namespace
    ON jobs ((CASE WHEN job_id = array_id || '-0' THEN array_id ELSE job_id END));
