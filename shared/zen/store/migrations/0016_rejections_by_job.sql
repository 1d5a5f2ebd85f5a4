-- `zen submit --wait` polls a job's refusals (zen.follow, rejections_of_job) every half second: by
-- its job_id, not a read of every refusal ever recorded.
CREATE INDEX rejected_messages_job ON rejected_messages (job_id, id);
