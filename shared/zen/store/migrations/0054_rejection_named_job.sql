-- A refused message names a job id its sender is not shown to own (its sender unproven, not allowed to act on
-- that job, or the job another user's): the row keeps that id in named_job_id, and job_id stays NULL, so what
-- reads a job's refusals by its id (zen jobs get, zen logs -f, zen explain of an id with no job) never shows one
-- anybody could make (zen.jobs.rejections). Its own sender still finds it by its message id (rejections_of_job).
ALTER TABLE rejected_messages ADD COLUMN named_job_id text;
CREATE INDEX rejected_messages_named_job ON rejected_messages (named_job_id, id) WHERE named_job_id IS NOT NULL;
