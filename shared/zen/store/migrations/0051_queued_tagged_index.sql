-- The queued jobs whose request requires tags (zen.core.routing), which the scale tick looks at before each
-- scaling pass (queued_jobs_uncleared: a tag that left their regions while they waited). Most jobs require
-- none, so this index holds few rows and a tick reads no more for a queue of 100,000 untagged jobs than
-- before; read through jobs_queued_demand, it read every queued job's request. Built under the jobs table's
-- lock: migrate in a quiet moment.
CREATE INDEX jobs_queued_tagged ON jobs (cluster, queued_at)
    WHERE status = 'QUEUED' AND gang IS NULL AND jsonb_typeof(request -> 'requires_tags') = 'array'
          AND (request -> 'requires_tags') <> '[]';
