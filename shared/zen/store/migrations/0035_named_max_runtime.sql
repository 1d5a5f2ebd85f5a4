-- The max_runtime_s a job's request named (NULL: it named none, and max_runtime_s holds the configured cap):
-- the scaling tick's demand groups carry their longest (queued_demand's `longest`), so the planner counts no
-- flex-start VM whose run ends before it (zen.scaling.flexrun). A generated column, as checkpoint_every_s
-- (0024): reading it from each queued job's request (1 kB) took the demand query at 100,000 queued jobs from
-- 155 to 287 ms; from this column, 165 ms against 166 without it (medians of 11, interleaved). What it costs:
-- a lone single-row INSERT of a job 7-9% slower (1,807-2,025 against 1,947-2,217 a second), a small part of
-- a submission's time. Adding it rewrites the jobs table once, under its lock: migrate in a quiet moment.
ALTER TABLE jobs
    ADD COLUMN named_max_runtime_s integer GENERATED ALWAYS AS (
        CASE WHEN jsonb_typeof(request -> 'max_runtime_s') = 'number'
             THEN LEAST(GREATEST((request ->> 'max_runtime_s')::numeric, 1), 2147483647)::integer END) STORED;
