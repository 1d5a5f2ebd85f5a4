-- Named queries. Each starts with "-- name: NAME" and uses pg8000 :name parameters.

-- name: insert_job
-- ON CONFLICT: a redelivered submit (same job_id) inserts nothing; the caller then compares hashes. So does
-- an id an array has (or, for an array's task 0, an array id a job or task has: jobs_one_namespace).
INSERT INTO jobs (job_id, status, attempt, max_attempts, budget, cluster, user_id, priority, regions, request,
                  request_hash, max_runtime_s, last_seq, submitted_at, queued_at, updated_at, queue, gpus, hold)
VALUES (:job_id, :status, 1, :max_attempts, :max_attempts, :cluster, :user_id, :priority, CAST(:regions AS jsonb),
        CAST(:request AS jsonb), :request_hash, :max_runtime_s, 0, :now, NULL, :now, :queue, :gpus, :hold)
ON CONFLICT DO NOTHING
RETURNING job_id;

-- name: get_job
SELECT * FROM jobs WHERE job_id = :job_id;

-- name: lock_job
-- Row lock for the length of the transaction: messages about one job are applied one at a time.
SELECT * FROM jobs WHERE job_id = :job_id FOR UPDATE;

-- name: record_progress
-- The most common heartbeat in one statement: RUNNING, from the VM holding the running attempt,
-- newer than the last one applied (what zen.core.lifecycle.decide_heartbeat does with it: record seq,
-- time and message: none, its command running, clears a note of its preparing). Any other heartbeat matches no row and takes the general path, as does one from a VM made
-- after the attempt started (:vm_since, from its token: a VM its MIG recreated under the name, zen.core.incarnation).
UPDATE jobs
SET last_seq = :seq, last_heartbeat_at = :now, message = :message, updated_at = :now
WHERE job_id = :job_id AND status = 'RUNNING' AND attempt = :attempt AND vm = :vm AND last_seq < :seq
  AND (CAST(:vm_since AS timestamptz) IS NULL OR started_at >= CAST(:vm_since AS timestamptz))
  AND gang IS NULL  -- a gang's node reports per node (zen.core.gang): the general path
RETURNING job_id;

-- name: update_job
-- Guarded by the status and attempt the decision was made on, so a concurrent change is never
-- overwritten (the row is also locked; the guard keeps the invariant local to this statement).
UPDATE jobs
SET status = :status, attempt = :attempt, max_attempts = :max_attempts, vm = :vm, region = :region, zone = :zone,
    last_seq = :last_seq, last_heartbeat_at = :last_heartbeat_at, queued_at = :queued_at,
    started_at = :started_at, finished_at = :finished_at, exit_code = :exit_code,
    message = :message, start_published_at = :start_published_at, preempted_by = :preempted_by,
    stop_reason = :stop_reason,
    preemptions = :preemptions, start_regions = CAST(:start_regions AS jsonb), widen_at = :widen_at,
    start_vms = CAST(:start_vms AS jsonb), regions = CAST(:regions AS jsonb), hold = :hold,
    hold_until = :hold_until, retries = :retries, gang = CAST(:gang AS jsonb),
    left_vms = CAST(:left_vms AS jsonb), heard_at = :heard_at, fence_timeout_s = :fence_timeout_s, updated_at = :now
WHERE job_id = :job_id AND status = :expected_status AND attempt = :expected_attempt
RETURNING job_id;

-- name: insert_job_events
-- History rows in one statement: :rows is a JSON array of rows, inserted in its order.
INSERT INTO job_events (job_id, at, actor, attempt, from_status, to_status, reason)
SELECT e.job_id, e.at, e.actor, e.attempt, e.from_status, e.to_status, e.reason
FROM ROWS FROM (jsonb_to_recordset(CAST(:rows AS jsonb))
         AS (job_id text, at timestamptz, actor text, attempt integer, from_status text, to_status text, reason text))
     WITH ORDINALITY AS e(job_id, at, actor, attempt, from_status, to_status, reason, n)
ORDER BY e.n;

-- name: submit_jobs
-- Submissions in one statement and one commit (zen.store.submits: concurrent deliveries share it,
-- a lone one is a batch of one): per job, the job already QUEUED, its history and its outgoing
-- messages. :jobs is a JSON array, an object per submission (at: its time; its history and messages as
-- arrays, message data in base64: zen.store.submits.submission_row). A job_id given twice is written
-- once, by its first entry; a job whose job_id exists (a redelivery or a reuse), names an array or for
-- which a stop came first is not written: its caller takes the general path. One row out: the written jobs (their
-- places in :jobs, from 1) and the outbox rows' ids (in the written jobs' order and their messages'),
-- each comma-separated, NULL for none.
WITH input AS (
    SELECT b.*
    FROM ROWS FROM (jsonb_to_recordset(CAST(:jobs AS jsonb)) AS (
             job_id text, at timestamptz, max_attempts integer, cluster text, user_id text, priority integer, regions jsonb,
             request jsonb, request_hash text, max_runtime_s integer, gpus integer, start_regions jsonb,
             widen_at timestamptz, start_vms jsonb, history jsonb, messages jsonb))
         WITH ORDINALITY AS b(job_id, at, max_attempts, cluster, user_id, priority, regions, request, request_hash,
                              max_runtime_s, gpus, start_regions, widen_at, start_vms, history, messages, n)
), firsts AS (
    SELECT DISTINCT ON (job_id) * FROM input ORDER BY job_id, n
), job AS (
    INSERT INTO jobs (job_id, status, attempt, max_attempts, budget, cluster, user_id, priority, regions, request,
                      request_hash, max_runtime_s, last_seq, submitted_at, queued_at, start_published_at,
                      updated_at, gpus, start_regions, widen_at, start_vms)
    SELECT f.job_id, 'QUEUED', 1, f.max_attempts, f.max_attempts, f.cluster, f.user_id, f.priority, f.regions, f.request,
           f.request_hash, f.max_runtime_s, 0, f.at, f.at, f.at, f.at, f.gpus, f.start_regions, f.widen_at,
           f.start_vms
    FROM firsts f
    WHERE NOT EXISTS (SELECT 1 FROM early_stops e WHERE e.job_id = f.job_id)
      AND NOT EXISTS (SELECT 1 FROM jobs a WHERE a.array_id = f.job_id)  -- an array's id: refused on the general path
    ORDER BY f.job_id  -- one order for every batch: two batches sharing job_ids cannot deadlock
    ON CONFLICT DO NOTHING  -- the job_id, or an array's id being inserted meanwhile (jobs_one_namespace)
    RETURNING job_id
), written AS (
    SELECT f.* FROM firsts f JOIN job USING (job_id)
), history AS (
    INSERT INTO job_events (job_id, at, actor, attempt, from_status, to_status, reason)
    SELECT w.job_id, w.at, h.actor, 1, h.from_status, h.to_status, h.reason
    FROM written w, ROWS FROM (jsonb_to_recordset(w.history)
                               AS (actor text, from_status text, to_status text, reason text))
                    WITH ORDINALITY AS h(actor, from_status, to_status, reason, k)
    ORDER BY w.n, h.k
), box AS (
    INSERT INTO outbox (topic, data, attributes, created_at)
    SELECT m.topic, decode(m.data, 'base64'), m.attributes, w.at
    FROM written w, ROWS FROM (jsonb_to_recordset(w.messages) AS (topic text, data text, attributes jsonb))
                    WITH ORDINALITY AS m(topic, data, attributes, k)
    ORDER BY w.n, m.k
    RETURNING id
)
-- Comma-separated text, not arrays: the driver parses an array character by character in Python (42 us
-- for a batch's 24 ids, ~3% of a busy instance's CPU per submission); split and int() take 2 us.
SELECT (SELECT string_agg(CAST(n AS text), ',' ORDER BY n) FROM written) AS written,
       (SELECT string_agg(CAST(id AS text), ',' ORDER BY id) FROM box) AS ids;

-- name: job_history
SELECT id, at, actor, attempt, from_status, to_status, reason
FROM job_events WHERE job_id = :job_id ORDER BY id;

-- name: list_jobs
SELECT * FROM jobs
WHERE (CAST(:status AS text) IS NULL OR status = :status)
  AND (CAST(:cluster AS text) IS NULL OR cluster = :cluster)
ORDER BY submitted_at, job_id
LIMIT :limit;

-- name: recent_jobs
-- `zen jobs list` and the console's job list: newest first, every filter optional (labels: the request's
-- labels contain these; a label few jobs carry is read through jobs_labels, migration 0071). A page after the first starts below the last row shown (before_at, before_id: a
-- keyset, so the index is entered there, not scanned from the top). A viewer who may not see every job
-- (zen.console.viewers) sees their own (owner: jobs_owner_recent) and those of the queues they belong to
-- (queue: jobs_queue_recent), one read each, merged by the caller (repository.recent_jobs). Job ids in byte
-- order (COLLATE "C", as the indexes, migration 0063): Python's string order, in which the caller merges; the
-- database's own collation (en_US.UTF8 on Cloud SQL) orders ids of one submitted_at otherwise.
SELECT * FROM jobs
WHERE (CAST(:before_at AS timestamptz) IS NULL
       OR (submitted_at, job_id COLLATE "C") < (CAST(:before_at AS timestamptz), CAST(:before_id AS text)))
  AND (CAST(:owner AS text) IS NULL OR lower(user_id) = lower(:owner))
  AND (CAST(:status AS text) IS NULL OR status = :status)
  AND (CAST(:cluster AS text) IS NULL OR cluster = :cluster)
  AND (CAST(:user_id AS text) IS NULL OR user_id = :user_id)
  AND (CAST(:queue AS text) IS NULL OR queue = :queue)
  AND (CAST(:array_id AS text) IS NULL OR array_id = :array_id)
  AND (CAST(:since AS timestamptz) IS NULL OR submitted_at >= :since)
  -- No labels asked: folded away, so the planner does not take the containment for a filter of 1%.
  AND (CAST(:labels AS jsonb) = '{}'::jsonb OR COALESCE(request -> 'labels', '{}'::jsonb) @> CAST(:labels AS jsonb))
ORDER BY submitted_at DESC, job_id COLLATE "C" DESC
LIMIT :limit;

-- name: active_jobs
-- `zen watch`: the jobs not finished yet, newest first.
SELECT * FROM jobs WHERE status IN ('PENDING','QUEUED','ASSIGNED','RUNNING','STOPPING')
ORDER BY submitted_at DESC
LIMIT :limit;

-- name: count_active_jobs
SELECT count(*) AS n FROM jobs WHERE status IN ('PENDING','QUEUED','ASSIGNED','RUNNING','STOPPING');

-- name: held_jobs_silent_since
-- Candidates for the lost-job sweep (no lock here: each is re-read FOR UPDATE and re-decided).
-- Oldest silence first; the expression is jobs_held_silence's. Each past its own deadline (zen.core.lifecycle.
-- decide_silence): a running job past :cutoff, a STOPPING one past :stop_cutoff, or :preempted_cutoff where its
-- queue took it back or a gang stops for a node lost (zen.core.gang_ends.losing_node). Read past the shortest of them,
-- 500 STOPPING jobs waiting out a long stop_timeout_s filled the window and hid a running job gone silent.
SELECT job_id FROM jobs
WHERE status IN ('ASSIGNED','RUNNING','STOPPING')
  AND COALESCE(last_heartbeat_at, updated_at) < GREATEST(CAST(:cutoff AS timestamptz),
                                                         CAST(:stop_cutoff AS timestamptz),
                                                         CAST(:preempted_cutoff AS timestamptz))
  AND COALESCE(last_heartbeat_at, updated_at) < CASE
        WHEN status <> 'STOPPING' THEN CAST(:cutoff AS timestamptz)
        WHEN preempted_by IS NOT NULL OR (nodes > 1 AND stop_reason IS NULL) THEN CAST(:preempted_cutoff AS timestamptz)
        ELSE CAST(:stop_cutoff AS timestamptz) END
  -- An attempt whose agent fences from a longer timeout than :timeout_s (the configuration's, lowered since its VM
  -- booted: zen.core.lease.attempt_deadlines) is not due until then: read sooner, 500 of them filled the window. So
  -- too one its queue took back or a gang stopping for a node lost: its rerun waits preempted_stop_s of that timeout,
  -- never less than the timeout itself nor than :preempted_cutoff's (zen.core.lease.Deadlines.preempted_stop_s).
  AND (fence_timeout_s IS NULL OR CAST(:timeout_s AS double precision) IS NULL
       OR fence_timeout_s <= CAST(:timeout_s AS double precision)
       OR status = 'STOPPING' AND preempted_by IS NULL AND NOT (nodes > 1 AND stop_reason IS NULL)
       OR COALESCE(last_heartbeat_at, updated_at) < CAST(:cutoff AS timestamptz)
          - make_interval(secs => fence_timeout_s - CAST(:timeout_s AS double precision)))
ORDER BY COALESCE(last_heartbeat_at, updated_at)
LIMIT :limit;

-- name: record_tick
-- The tick's clock: a gap is an interval longer than :gap_s and than 1.5 times the schedule's, as
-- the ticks see it: the longest recent interval, decaying by a tenth a tick, so a schedule that is
-- slow or irregular all along (ticks skipped while a long one holds the lock) is no gap after the
-- first few. A gap teaches at most twice the interval learnt (an outage is no schedule: learnt whole,
-- ten minutes of it hid a three-minute outage a quarter of an hour later). The end of a gap is when
-- Zen could hear again. zen_dev.fakes.jobrows.record_tick is the same rule.
INSERT INTO tick_clock AS t (last_at) VALUES (:now)
ON CONFLICT (singleton) DO UPDATE SET
    back_at = CASE WHEN t.interval_s IS NOT NULL
                        AND EXTRACT(EPOCH FROM (:now - t.last_at)) > GREATEST(:gap_s, 1.5 * t.interval_s)
                   THEN :now ELSE t.back_at END,
    interval_s = GREATEST(LEAST(EXTRACT(EPOCH FROM (:now - t.last_at)), 2 * COALESCE(t.interval_s, 'Infinity')),
                          0.9 * COALESCE(t.interval_s, 0)),
    last_at = :now
RETURNING back_at;

-- name: look_at_probe
-- The tick's look at its last probe of the heartbeat path (zen.jobs.probes), after record_tick in the same
-- transaction (the row is locked): whether it is unheard :late_s after it was sent while probes came through
-- before (late: said, no more), and how far the path is vouched for (probe_vouched_at); a new probe (:nonce, sent
-- :now) once the last was heard, or none was sent, or it is unheard :stale_s after it was sent (lost, or the path
-- slow or stalled): replaced unheard, it is kept as the previous probe, which still vouches if it comes through.
WITH old AS (SELECT probe_sent_at, probe_heard_at, probe_seen,
                    (probe_seen AND probe_sent_at IS NOT NULL AND probe_heard_at IS NULL
                     AND EXTRACT(EPOCH FROM (:now - probe_sent_at)) > :late_s) AS late,
                    (probe_sent_at IS NULL OR probe_heard_at IS NOT NULL
                     OR EXTRACT(EPOCH FROM (:now - probe_sent_at)) > :stale_s) AS due,
                    (probe_sent_at IS NOT NULL AND probe_heard_at IS NULL) AS unheard
             FROM tick_clock)
UPDATE tick_clock SET
    -- (a probe heard cleared the previous one: probe_heard)
    probe_prev_nonce = CASE WHEN old.due AND old.unheard THEN tick_clock.probe_nonce ELSE tick_clock.probe_prev_nonce END,
    probe_prev_sent_at = CASE WHEN old.due AND old.unheard THEN tick_clock.probe_sent_at
                              ELSE tick_clock.probe_prev_sent_at END,
    probe_nonce = CASE WHEN old.due THEN :nonce ELSE tick_clock.probe_nonce END,
    probe_sent_at = CASE WHEN old.due THEN :now ELSE tick_clock.probe_sent_at END,
    probe_heard_at = CASE WHEN old.due THEN NULL ELSE tick_clock.probe_heard_at END
FROM old
RETURNING tick_clock.back_at, old.due AS publish, old.late, old.probe_seen AS seen, old.probe_sent_at AS sent_at,
          tick_clock.probe_vouched_at AS vouched_at, tick_clock.delivery_lag_s AS lag_s,
          tick_clock.delivery_lag_at AS lag_at;

-- name: probe_unsent
-- The probe :nonce could not be published: it vouches for nothing (the path may have stalled since the last probe
-- came through; zen.jobs.probes bounds how long that holds silences). Its nonce goes too: should it come through
-- after all (a publish that timed out), it is no probe of this tick's.
UPDATE tick_clock SET probe_sent_at = NULL, probe_nonce = NULL WHERE probe_nonce = :nonce AND probe_heard_at IS NULL;

-- name: lock_tick_clock
-- Before record_tick and before probe_heard, a statement of its own: the tick publishes its probe before its
-- transaction keeping the nonce commits (zen.jobs.probes.send), so a probe heard that soon waits here for that
-- commit, and probe_heard's snapshot, taken after, reads the nonce (read at once, it missed it: heard as none, the
-- probe then stayed unheard, and the sweep held every silence as if the path had stalled). A lock of its own, not
-- the row's: the first tick of a database inserts the row, which a probe heard before that commit could not wait on
-- (tests/test_first_tick_probe_heard_at_once.py). Taken first by both: no other lock is held before it.
SELECT pg_advisory_xact_lock(hashtext('zen-tick-clock'));

-- name: probe_heard
-- The heartbeat function heard the probe :nonce: noted when it is the last one sent, not heard before, or the one
-- it replaced unheard; what Pub/Sub accepted up to when it was sent has come through (the path is vouched for up
-- to then, however late it came). Returns its lag. While one replaced unheard is outstanding (either is heard),
-- the path was stalled two timeouts: its backlog comes back in no order (each message in its own backoff, the
-- newest soonest), so silences count afresh from now (back_at), as after a gap in the ticks.
-- Run after lock_tick_clock, in the same transaction.
WITH old AS (SELECT CASE WHEN probe_nonce = :nonce THEN probe_sent_at ELSE probe_prev_sent_at END AS sent_at,
                    probe_prev_nonce IS NOT NULL AS stalled
             FROM tick_clock
             WHERE (probe_nonce = :nonce AND probe_heard_at IS NULL AND probe_sent_at IS NOT NULL)
                OR probe_prev_nonce = :nonce)
UPDATE tick_clock SET probe_seen = true,
    probe_heard_at = CASE WHEN probe_nonce = :nonce THEN :now ELSE probe_heard_at END,
    probe_vouched_at = CASE WHEN probe_vouched_at > :now THEN old.sent_at  -- the clock stepped back: from here
                            ELSE GREATEST(probe_vouched_at, old.sent_at) END,
    back_at = CASE WHEN old.stalled THEN :now ELSE back_at END,
    probe_prev_nonce = NULL, probe_prev_sent_at = NULL
FROM old
RETURNING EXTRACT(EPOCH FROM (:now - old.sent_at)) AS lag_s;

-- name: heard_late
-- A report came through :lag_s after Pub/Sub accepted it (zen.jobs.probes.heard_late, only when over its threshold):
-- kept when above the lag kept, or that one is older than :fresh_s (then replaced: the hold follows the path's lag as
-- it falls), or was seen more than :fresh_s after :now (the clock stepped back). One seen less than that after :now is another
-- request's, begun later and written first (:now is when the push came): a smaller lag does not replace it.
-- No row (no tick yet): nothing.
UPDATE tick_clock SET delivery_lag_s = :lag_s, delivery_lag_at = :now
WHERE delivery_lag_at IS NULL OR delivery_lag_s < :lag_s
   OR ABS(EXTRACT(EPOCH FROM (:now - delivery_lag_at))) > :fresh_s;

-- name: queued_jobs_published_before
-- QUEUED jobs whose start message went out before :cutoff and that nobody has claimed since.
-- Longest-waiting first; the expression is jobs_queued_republish's.
SELECT job_id FROM jobs
WHERE status = 'QUEUED' AND COALESCE(start_published_at, queued_at) < :cutoff
ORDER BY COALESCE(start_published_at, queued_at)
LIMIT :limit;

-- name: pending_jobs
-- PENDING jobs without a hold, oldest first: without queues: (the operator removed them) the tick admits
-- those left waiting. Read through jobs_active. No lock here: each is re-read FOR UPDATE and re-decided.
-- With queues, :queue_less: those of no queue (submitted before queues were configured: no queue's pass reads them).
SELECT job_id FROM jobs
WHERE status = 'PENDING' AND hold IS NULL AND (NOT CAST(:queue_less AS boolean) OR queue IS NULL)
ORDER BY submitted_at, job_id
LIMIT :limit;

-- name: queued_jobs_to_widen
-- Narrowed QUEUED jobs whose wait near their data is over (zen.core.routing), longest-narrowed first; the
-- index is jobs_queued_widen. No lock here: each is re-read FOR UPDATE and re-decided.
SELECT job_id FROM jobs
WHERE status = 'QUEUED' AND widen_at IS NOT NULL AND widen_at <= :now
ORDER BY widen_at
LIMIT :limit;

-- name: gang_nodes_in_flight
-- Per region of a cluster, its VMs that are gangs' nodes in flight (gang_node_in_flight, migration 0057): each on
-- its way into a gang assembling there (zen.store.fleet.gang_rooms adds them to the room a pass measured).
SELECT vms.region, CAST(count(*) AS integer) AS vms FROM vms JOIN jobs AS job ON job.job_id = vms.job_id
WHERE vms.cluster = :cluster AND vms.state = 'BUSY' AND gang_node_in_flight(vms, job)
GROUP BY vms.region;

-- name: gangs_assembling_in
-- A cluster's gangs assembling (QUEUED, some node claimed: zen.core.gang) in one of :regions, for the tick's
-- check of the regions a stockout blocks; each is re-read FOR UPDATE and re-decided. An assembling gang
-- always has its deadline in widen_at, so the jobs_queued_widen index finds them.
SELECT job_id FROM jobs
WHERE status = 'QUEUED' AND widen_at IS NOT NULL AND gang IS NOT NULL AND cluster = :cluster
  AND gang -> 0 ->> 'region' = ANY(CAST(:regions AS text[]))
ORDER BY widen_at
LIMIT :limit;

-- name: queued_jobs_uncleared
-- A cluster's QUEUED jobs (no gang node claimed) allowed a region whose VMs lack a tag the job's request requires
-- (:carried: region -> the tags the configuration gives its VMs now; a region not in it carries none): the
-- configuration changed while they waited (zen.jobs.sweeps.Sweeps.narrow_uncleared), oldest first. Read through
-- jobs_queued_tagged (migration 0051: few rows); each is re-read FOR UPDATE and re-decided.
SELECT job_id FROM jobs
WHERE status = 'QUEUED' AND cluster = :cluster AND gang IS NULL
  AND jsonb_typeof(request -> 'requires_tags') = 'array' AND (request -> 'requires_tags') <> '[]'
  AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(regions) AS allowed(region)
              WHERE NOT (COALESCE(CAST(:carried AS jsonb) -> allowed.region, '[]') @> (request -> 'requires_tags')))
ORDER BY queued_at, job_id
LIMIT :limit;

-- name: queued_jobs_short
-- A cluster's QUEUED jobs (no gang node claimed) whose request names no regions, not allowed a region the cluster
-- has now whose VMs carry every tag they require (:carried: region -> its tags now): a region added while they
-- waited (zen.jobs.sweeps.Sweeps.narrow_uncleared), oldest first. A job allowed every region of the cluster (most
-- of them) fails the first test, on a column: its request is not read.
SELECT job_id FROM jobs
WHERE status = 'QUEUED' AND cluster = :cluster AND gang IS NULL
  AND NOT (regions @> (SELECT COALESCE(jsonb_agg(region), '[]') FROM jsonb_object_keys(CAST(:carried AS jsonb)) AS r(region)))
  AND jsonb_typeof(request -> 'regions') IS DISTINCT FROM 'array'
  AND EXISTS (SELECT 1 FROM jsonb_each(CAST(:carried AS jsonb)) AS here(region, tags)
              WHERE NOT (regions ? here.region)
                AND here.tags @> COALESCE(NULLIF(request -> 'requires_tags', 'null'), '[]'))
ORDER BY queued_at, job_id
LIMIT :limit;

-- name: queued_jobs_gpus_above
-- A cluster's QUEUED jobs (no gang node claimed) asking more GPUs of one VM than :gpu_count, the cluster's VMs' now
-- (its machine type changed while they waited: zen.jobs.sweeps.Sweeps.narrow_uncleared), oldest first: the GPUs of
-- each VM they asked by shape (their request's gpu_count), else what they held of each of their VMs when accepted
-- (zen.jobs.placement.gpus_short). A job asking more of a VM than :gpu_count holds more than :gpu_count in all, so
-- the range on gpus (jobs_queued_gpus, migration 0068) reads no row while every queued job fits.
SELECT job_id FROM jobs
WHERE status = 'QUEUED' AND cluster = :cluster AND gang IS NULL AND gpus > :gpu_count
  AND COALESCE(CAST(NULLIF(request ->> 'gpu_count', '') AS integer), gpus / GREATEST(nodes, 1)) > :gpu_count
ORDER BY queued_at, job_id
LIMIT :limit;

-- name: queued_jobs_of_other_clusters
-- The QUEUED jobs (no gang node claimed) of a cluster not among :clusters (the configured ones: one removed while
-- they waited, zen.jobs.stranding), oldest first. Each gap between configured names, ordered as the index orders
-- them (before the first, between two, after the last), is a range on jobs_queued_gpus (migration 0068)'s cluster:
-- no row is read while every queued job's cluster is configured (cluster <> ALL read each of them).
WITH named AS (SELECT DISTINCT name FROM unnest(CAST(:clusters AS text[])) AS c(name)),
     gaps AS (SELECT lag(name) OVER (ORDER BY name) AS low, name AS high FROM named),
     ends AS (SELECT min(name) AS first, max(name) AS last FROM named),
     -- The queued clusters past either end (an index's first entry there, none read while there is none), which
     -- bound those gaps too: a bound alone, the planner expected a third of the jobs and read them all.
     outer_ends AS (SELECT first, last,
         (SELECT cluster FROM jobs WHERE status = 'QUEUED' AND gang IS NULL AND cluster < ends.first
          ORDER BY cluster LIMIT 1) AS lowest,
         (SELECT cluster FROM jobs WHERE status = 'QUEUED' AND gang IS NULL AND cluster > ends.last
          ORDER BY cluster DESC LIMIT 1) AS highest FROM ends)
SELECT job_id FROM (  -- (each part its own LIMIT: a range on the index for each gap, not a join over every job)
    SELECT j.job_id, j.queued_at FROM outer_ends AS e CROSS JOIN LATERAL (
        SELECT job_id, queued_at FROM jobs
        WHERE status = 'QUEUED' AND gang IS NULL AND cluster >= e.lowest AND cluster < e.first LIMIT :limit) AS j
    UNION ALL
    SELECT j.job_id, j.queued_at FROM gaps CROSS JOIN LATERAL (
        SELECT job_id, queued_at FROM jobs
        WHERE status = 'QUEUED' AND gang IS NULL AND cluster < gaps.high AND cluster > gaps.low LIMIT :limit) AS j
    UNION ALL
    SELECT j.job_id, j.queued_at FROM outer_ends AS e CROSS JOIN LATERAL (
        SELECT job_id, queued_at FROM jobs
        WHERE status = 'QUEUED' AND gang IS NULL AND cluster > e.last AND cluster <= e.highest LIMIT :limit) AS j
    ) AS gone
ORDER BY queued_at, job_id
LIMIT :limit;

-- name: queued_jobs_unfit
-- A cluster's QUEUED jobs (no gang node claimed) that ask what it no longer has (zen.jobs.stranding.stranded), oldest
-- first: the one provisioning model they accept among :models (those it does not list), flex-start alone (or any
-- model, where :flex_alone: flex-start the cluster's only one) and a named max_runtime_s above its flex-start VMs'
-- run (:flex_run_s; jobs accepting any: read through the cluster's queued jobs, only on a cluster whose one model is
-- flex-start, a rare configuration, and none read elsewhere), more nodes than :most_nodes (max_vms,
-- max_vms_per_region lowered), or regions none of which is among :regions (the cluster's now; jobs whose request
-- named none are widened to those by queued_jobs_short). Each part is a range or an equality on an index of
-- migration 0069 and reads no row while every queued job fits; the regions part reads one index entry for each
-- distinct set of regions named (jobs that named regions alone, read as a loose index scan), not one a job.
WITH RECURSIVE named_sets(regions) AS (
    (SELECT regions FROM jobs
     WHERE status = 'QUEUED' AND gang IS NULL AND jsonb_typeof(request -> 'regions') = 'array' AND cluster = :cluster
     ORDER BY regions LIMIT 1)
    UNION ALL
    SELECT (SELECT j.regions FROM jobs AS j
            WHERE j.status = 'QUEUED' AND j.gang IS NULL AND jsonb_typeof(j.request -> 'regions') = 'array'
              AND j.cluster = :cluster AND j.regions > named_sets.regions
            ORDER BY j.regions LIMIT 1)
    FROM named_sets WHERE named_sets.regions IS NOT NULL
)
SELECT job_id FROM (
    SELECT job_id, queued_at FROM jobs
    WHERE status = 'QUEUED' AND gang IS NULL AND provisioning IS NOT NULL AND cluster = :cluster
      AND provisioning = ANY(CAST(:models AS text[]))
    UNION
    SELECT job_id, queued_at FROM jobs
    WHERE status = 'QUEUED' AND gang IS NULL AND provisioning IS NOT NULL AND cluster = :cluster
      AND provisioning = 'flex-start' AND named_max_runtime_s > :flex_run_s
    UNION
    SELECT job_id, queued_at FROM jobs
    WHERE status = 'QUEUED' AND gang IS NULL AND (provisioning IS NULL OR provisioning = 'any') AND cluster = :cluster
      AND named_max_runtime_s > :flex_run_s AND CAST(:flex_alone AS boolean)
    UNION
    SELECT job_id, queued_at FROM jobs
    WHERE status = 'QUEUED' AND gang IS NULL AND nodes > 1 AND cluster = :cluster AND nodes > :most_nodes
    UNION
    SELECT j.job_id, j.queued_at FROM named_sets CROSS JOIN LATERAL (
        SELECT job_id, queued_at FROM jobs
        WHERE status = 'QUEUED' AND gang IS NULL AND jsonb_typeof(request -> 'regions') = 'array'
          AND cluster = :cluster AND regions = named_sets.regions) AS j
    WHERE named_sets.regions IS NOT NULL AND NOT (named_sets.regions ?| CAST(:regions AS text[]))) AS unfit
ORDER BY queued_at, job_id
LIMIT :limit;

-- name: queued_jobs_outranking
-- A cluster's QUEUED single-VM jobs of higher priority than :priority, not offered to other VMs now (offered to :vm, a
-- JSON array of its name, or their offer due to widen), highest priority first, then oldest, at most :limit: those a
-- VM that claims a job of :priority might run instead (zen.jobs.claims.outranked, which locks its choice). Read through jobs_queued_priority
-- (migration 0053): no row where every job has one priority, :limit where many have a higher one. The regions a job's
-- start reaches are the caller's to check: a filter on them here (jsonb containment, estimated far too selective)
-- made Postgres read and sort every queued job of higher priority instead.
SELECT * FROM jobs
WHERE status = 'QUEUED' AND cluster = :cluster AND priority > :priority AND nodes = 1 AND gang IS NULL
  AND (start_vms IS NULL OR widen_at <= :now OR start_vms @> CAST(:vm AS jsonb))
ORDER BY priority DESC, queued_at, job_id
LIMIT :limit;

-- name: lock_job_unless_held
-- The job's row locked for the transaction, or nothing where another transaction holds it (never waited for: a claim
-- that holds a VM's lock must not wait for a row whose holder waits for that VM's lock, zen.jobs.claims.outranked).
SELECT * FROM jobs WHERE job_id = :job_id FOR UPDATE SKIP LOCKED;

-- name: insert_early_stop
-- One kept per job and sender (migration 0033): a sender's first.
INSERT INTO early_stops (job_id, reason, requested_at, principal) VALUES (:job_id, :reason, :now, :principal)
ON CONFLICT (job_id, (COALESCE(principal, ''))) DO NOTHING;

-- name: take_early_stops
DELETE FROM early_stops WHERE job_id = :job_id RETURNING reason, principal, requested_at;

-- name: kept_stop_names
-- Of :job_id and its array's id, those a stop is kept for (the claim path's check: zen.jobs.sweeps.Sweeps.before_claim;
-- a stop of the array that crossed its submission is kept under the array's id).
SELECT DISTINCT e.job_id FROM early_stops e
WHERE e.job_id = :job_id OR e.job_id = (SELECT j.array_id FROM jobs j WHERE j.job_id = :job_id);

-- name: kept_stops_of
-- The stops kept for :job_id, not consumed, the first first: what `zen submit` reads before publishing (zen.cli.submitted).
SELECT reason, principal, requested_at FROM early_stops WHERE job_id = :job_id ORDER BY requested_at;

-- name: forget_early_stops
DELETE FROM early_stops WHERE requested_at < :cutoff;

-- name: early_stops_of_submitted_jobs
-- Stops kept for a job unknown when they came, whose job (or array: its tasks) exists now: a stop that
-- raced its submit (each transaction missed the other's uncommitted row).
SELECT job_id FROM (
    SELECT e.job_id, e.requested_at FROM early_stops e JOIN jobs j ON j.job_id = e.job_id
    UNION ALL
    SELECT e.job_id, e.requested_at FROM early_stops e
    WHERE EXISTS (SELECT 1 FROM jobs a WHERE a.array_id = e.job_id)  -- an array's (jobs_by_array)
) AS submitted
GROUP BY job_id
ORDER BY min(requested_at)
LIMIT :limit;

-- name: insert_outbox
-- Many messages in one statement: :messages is a JSON array (data in base64), inserted in its order.
INSERT INTO outbox (topic, data, attributes, created_at)
SELECT m.topic, decode(m.data, 'base64'), m.attributes, :now
FROM ROWS FROM (jsonb_to_recordset(CAST(:messages AS jsonb)) AS (topic text, data text, attributes jsonb))
     WITH ORDINALITY AS m(topic, data, attributes, n)
ORDER BY m.n
RETURNING id;

-- name: lock_outbox_unsent
-- The tick's resend: failed publishes, and rows old enough that no request is still publishing them.
-- Locked while publishing so two ticks never send the same row at once. The rows tried least go
-- first: rows of a topic that keeps failing sink below newer ones, and never fill the whole window.
SELECT id, topic, data, attributes FROM outbox
WHERE sent_at IS NULL AND (publish_attempts > 0 OR created_at < :cutoff)
ORDER BY publish_attempts, id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: mark_outbox_sent
UPDATE outbox SET sent_at = :now, publish_attempts = publish_attempts + 1, last_error = NULL
WHERE id = ANY(CAST(:ids AS bigint[]));

-- name: mark_outbox_failed
UPDATE outbox SET publish_attempts = publish_attempts + 1, last_error = :error WHERE id = :id;

-- name: prune_outbox
-- Sent rows are kept a while (for inspection), then deleted by the tick, a batch at a time.
WITH gone AS (
    DELETE FROM outbox WHERE id IN (
        SELECT id FROM outbox WHERE sent_at < :cutoff ORDER BY sent_at LIMIT :limit
    ) RETURNING 1
)
SELECT count(*) AS deleted FROM gone;

-- name: count_outbox_unsent
SELECT count(*) FROM outbox WHERE sent_at IS NULL;

-- name: insert_rejected
-- Nothing when the message is recorded already (source, message_id), or its repeat key is
-- (source, repeat_key: a row counting its repeats, written meanwhile by another instance).
INSERT INTO rejected_messages (at, source, message_id, job_id, named_job_id, reason, payload, repeat_key, principal)
VALUES (:now, :source, :message_id, :job_id, :named_job_id, :reason, :payload, :repeat_key, :principal)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: repeat_rejected
-- A refusal seen before (the row of its repeat key) counted once more (zen.store.rejections).
UPDATE rejected_messages SET count = count + 1, last_at = GREATEST(COALESCE(last_at, at), :now)
WHERE source = :source AND repeat_key = :repeat_key
RETURNING id;

-- name: rejection_last_seen
-- When a refusal of this repeat key was last recorded (the index is rejected_messages_repeats).
SELECT COALESCE(last_at, at) AS seen FROM rejected_messages WHERE source = :source AND repeat_key = :repeat_key;

-- name: list_rejected
SELECT id, at, last_at, count, source, message_id, job_id, named_job_id, reason, principal, payload
FROM rejected_messages ORDER BY id;

-- name: page_rejected
-- One page of `zen rejected`, newest first, before the id of the last page's oldest row (NULL: the
-- newest); payloads only when asked for; naming one job id only when it is given, as the job's or only named
-- (rejected_messages_job, rejected_messages_named_job).
SELECT id, at, last_at, count, source, message_id, job_id, named_job_id, reason, principal,
       CASE WHEN CAST(:payloads AS boolean) THEN payload END AS payload
FROM rejected_messages
WHERE (CAST(:before AS bigint) IS NULL OR id < CAST(:before AS bigint))
  AND (CAST(:job_id AS text) IS NULL OR job_id = CAST(:job_id AS text) OR named_job_id = CAST(:job_id AS text))
ORDER BY id DESC
LIMIT :limit;

-- name: prune_rejected
-- Rows last seen before the retention's cutoff, a batch at a time, oldest first (the index is
-- rejected_messages_last_seen): the tick deletes them (zen.store.rejections.prune).
WITH gone AS (
    DELETE FROM rejected_messages WHERE id IN (
        SELECT id FROM rejected_messages WHERE COALESCE(last_at, at) < :cutoff
        ORDER BY COALESCE(last_at, at) LIMIT :limit
    ) RETURNING 1
)
SELECT count(*) AS deleted FROM gone;

-- name: rejections_of_job
-- One job's refusals, newest first; of one message only, when message_id is given: then also one that only named
-- the id (its sender's, found by the id Pub/Sub gave the message: zen.jobs.rejections).
SELECT id, at, source, message_id, job_id, reason, principal FROM rejected_messages
WHERE (job_id = :job_id AND (CAST(:message_id AS text) IS NULL OR message_id = CAST(:message_id AS text)))
   OR (named_job_id = :job_id AND message_id = CAST(:message_id AS text))
ORDER BY id DESC LIMIT 1;

-- name: lock_vm_row
-- A VM's row, locked for its heartbeat's transaction: a heartbeat of the same VM being written
-- meanwhile is waited for, and the state read is the one it wrote (repository.upsert_vm), and which VM of the
-- name said RETIRED (vm_retired_as): that VM's later words of other states are recorded as RETIRED.
SELECT state, retired_created_at FROM vms WHERE name = :vm_name FOR UPDATE;

-- name: upsert_vm
-- Only a newer heartbeat (higher seq) changes the row: VM heartbeats also arrive out of order. An agent's
-- STOPPING keeps an IDLE VM's idle_since: one that crashes and restarts without end says IDLE, STOPPING, IDLE,
-- ... and its idle time counted from each restart never reached the keep (its VM billed for ever). A restart is
-- back within seconds; an IDLE more than a minute after the STOPPING is a VM its MIG recreated, idle from its start.
-- The agent's clock says since when (:sent_at, held by the caller to the last VM heartbeat period): never before Zen
-- last heard the VM in another state, so an agent whose clock is behind does not make a VM just idle look idle long.
INSERT INTO vms (name, cluster, region, zone, state, job_id, attempt, jobs, last_seq, first_seen_at,
                 last_seen_at, idle_since, cached_inputs, images)
VALUES (:vm_name, :cluster, :region, :zone, :state, :job_id, :attempt, CAST(:jobs AS jsonb), :seq, :now, :now,
        CASE WHEN :state = 'IDLE' THEN CAST(:sent_at AS timestamptz) END, CAST(:cached_inputs AS jsonb),
        CAST(:images AS jsonb))
ON CONFLICT (name) DO UPDATE
SET cluster = EXCLUDED.cluster, region = EXCLUDED.region, zone = EXCLUDED.zone,
    state = EXCLUDED.state, job_id = EXCLUDED.job_id, attempt = EXCLUDED.attempt,
    -- A shared VM's STOPPING from an agent that lists no jobs in it (older agents) still says the VM shared: the
    -- attempts that end after it (a report read late, the sweep's) are billed their share, not the whole VM.
    jobs = CASE WHEN EXCLUDED.jobs IS NULL AND EXCLUDED.state = 'STOPPING' AND vms.jobs IS NOT NULL
                THEN CAST('[]' AS jsonb) ELSE EXCLUDED.jobs END,
    cached_inputs = EXCLUDED.cached_inputs, images = EXCLUDED.images,
    last_seq = EXCLUDED.last_seq, last_seen_at = EXCLUDED.last_seen_at,
    idle_since = CASE WHEN EXCLUDED.state = 'IDLE' AND vms.state = 'STOPPING'
                           AND EXCLUDED.last_seen_at - vms.last_seen_at > interval '60 seconds'
                      THEN EXCLUDED.idle_since  -- back after a minute: a VM its MIG recreated (a boot), idle anew
                      WHEN EXCLUDED.state = 'IDLE' AND vms.state = 'IDLE' THEN COALESCE(vms.idle_since, EXCLUDED.idle_since)
                      -- idle anew: not before Zen last heard it otherwise (an agent's clock behind Zen's)
                      WHEN EXCLUDED.state = 'IDLE' THEN COALESCE(vms.idle_since, GREATEST(EXCLUDED.idle_since, vms.last_seen_at))
                      WHEN EXCLUDED.state = 'STOPPING' THEN vms.idle_since END
WHERE vms.last_seq < EXCLUDED.last_seq
RETURNING name;

-- name: vm_heard
-- A VM heartbeat older than the row's (repository.upsert_vm): when it was sent still counts as hearing the VM.
UPDATE vms SET last_seen_at = GREATEST(last_seen_at, CAST(:heard_at AS timestamptz)) WHERE name = :vm_name;

-- name: vms_holding
-- A cluster's idle VMs in :regions (a JSON array) whose warm cache holds every one of :inputs (a JSON
-- array of gs:// URIs; [] matches none), or the image :image (zen.core.routing): name, region, whether
-- a QUEUED job's start is offered to it already (the index jobs_queued_offered), and the model a scaling
-- pass recorded for it (vm_model's, NULL: none, its name tells; a primary MIG's spot VM stays spot after
-- its cluster's models were narrowed, and refuses a standard-only job's claim); those not offered
-- first, then the most recently heard from, at most :limit. The vms table holds one row per VM, kept
-- after the VM is gone: only VMs heard from since :seen_after count; a VM that holds a job (claimed
-- since its last VM heartbeat said IDLE; the index jobs_held_vm) does not, nor one being scaled down.
SELECT name, region, EXISTS (SELECT 1 FROM jobs
                             WHERE jobs.cluster = vms.cluster AND jobs.status = 'QUEUED'
                               AND jobs.start_vms IS NOT NULL AND jobs.start_vms @> jsonb_build_array(vms.name)
                            ) AS offered,
       (SELECT CASE WHEN i.running_at IS NULL AND i.billed_before IS NOT NULL THEN NULL ELSE i.model END
        FROM mig_instances i WHERE i.name = vms.name) AS model
FROM vms
WHERE cluster = :cluster AND state = 'IDLE' AND last_seen_at > :seen_after
  AND CAST(:regions AS jsonb) @> jsonb_build_array(region)
  AND ((jsonb_array_length(CAST(:inputs AS jsonb)) > 0 AND cached_inputs @> CAST(:inputs AS jsonb))
       OR (CAST(:image AS text) IS NOT NULL AND images @> jsonb_build_array(CAST(:image AS text))))
  AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.vm = vms.name
                    AND jobs.status IN ('ASSIGNED','RUNNING','STOPPING'))  -- claimed since its last heartbeat
  AND NOT EXISTS (SELECT 1 FROM vm_drains WHERE vm_drains.name = vms.name)  -- being scaled down: refuses claims
ORDER BY offered, last_seen_at DESC, name
LIMIT :limit;

-- name: list_vms
SELECT * FROM vms ORDER BY cluster, region, name;

-- name: try_tick_lock
SELECT pg_try_advisory_lock(:key) AS locked;

-- name: tick_unlock
SELECT pg_advisory_unlock(:key) AS unlocked;

-- name: queued_demand
-- A cluster's queued jobs aggregated by (priority, regions its start reaches now: narrowed near its
-- data, else allowed; zen.core.routing; the provisioning models they accept, NULL: any; their start
-- bound, NULL: the cluster's; how often they checkpoint, NULL: never): the planner's demand groups, which
-- zen.scaling.fleetdb turns into pools. A handful of rows however long the queue (found through the
-- jobs_queued_demand index).
-- A gang (nodes > 1: zen.core.gang) needs its nodes not claimed yet, all in one region: gangs are grouped by
-- how many that is (``need``: a gang of 4 with one node claimed needs 3 more, next to one with three claimed,
-- which needs 1: two groups, not one "gang of 4"); vms = the group's nodes needed. Nor its nodes in flight
-- (gang_node_in_flight, migration 0057: a VM whose agent said BUSY with the gang's attempt, its claim on the way):
-- the pass sees that VM busy (zen.scaling.vms.classify), so counted in the need too the gang wanted a VM more than
-- it lacks, and at max_vms the pass deleted the VM booting for its next node. A gang all of whose missing nodes
-- are in flight needs no VM: no row. A gang none of whose nodes is claimed yet, its nodes in flight all in one region
-- its start reaches, assembles there (its first claim narrows it so: zen.core.gang): its demand is in that region
-- alone. In all it allows, a pass asked for its other nodes in the first of them, VMs that booted for nothing (their
-- claims released once the node in flight claimed elsewhere), and the gang waited a pass and new boots for them.
-- longest: the group's longest max_runtime_s its request named (NULL: none did; the stored column holds the cap
-- then), what a flex-start VM must have left of its run to count. late: queued for its start bound or longer at
-- :now (its own max_start_wait_s, else the cluster's :bound), apart from the others: the planner ranks a group
-- past its bound by speed (zen.scaling.ranking.patient), and a job queued a moment ago went with an older one's.
-- inputs: the input lists of its jobs that name any (NULL: none does), priced in egress by zen.scaling.egress; read
-- only :with_inputs (a configuration naming bucket locations: zen.scaling.egress.weighs_inputs), else none.
SELECT priority, regions, provisioning, max_start_wait_s, checkpoint_every_s, count(*) AS jobs,
       min(queued_at) AS oldest, max(named_max_runtime_s) AS longest, nodes, need, CAST(sum(need) AS integer) AS vms,
       late, jsonb_agg(inputs) FILTER (WHERE inputs IS NOT NULL) AS inputs
-- The nodes in flight counted apart, over the cluster's busy VMs, joined by job id: a job's whole row passed to
-- gang_node_in_flight for each queued job read every column of each (2.5x the time at 30,000 queued; 1.3x so).
FROM (SELECT priority, CASE WHEN flying.places = 1 AND COALESCE(start_regions, regions) @> jsonb_build_array(flying.region)
                              THEN jsonb_build_array(flying.region) ELSE COALESCE(start_regions, regions) END AS regions,
             provisioning, max_start_wait_s, checkpoint_every_s, queued_at, named_max_runtime_s, nodes,
             nodes - COALESCE(jsonb_array_length(gang), 0) - COALESCE(flying.vms, 0) AS need,
             queued_at <= CAST(:now AS timestamptz)
                          - COALESCE(max_start_wait_s, CAST(:bound AS integer)) * interval '1 second' AS late,
             CASE WHEN CAST(:with_inputs AS boolean) AND jsonb_typeof(request -> 'inputs') = 'array'
                  THEN NULLIF(request -> 'inputs', '[]') END AS inputs
      FROM jobs
      LEFT JOIN (SELECT vms.job_id, count(*) AS vms, min(vms.region) AS region, count(DISTINCT vms.region) AS places
                 FROM vms JOIN jobs AS job ON job.job_id = vms.job_id
                 WHERE vms.cluster = :cluster AND vms.state = 'BUSY' AND gang_node_in_flight(vms, job)
                 GROUP BY vms.job_id) AS flying ON flying.job_id = jobs.job_id
      WHERE cluster = :cluster AND status = 'QUEUED') AS queued
WHERE need > 0
GROUP BY priority, regions, provisioning, max_start_wait_s, checkpoint_every_s, nodes, need, late;

-- name: queue_heads
-- Each of :clusters' most urgent QUEUED job: its highest priority, and the oldest queued_at at that priority. The
-- scale tick plans the clusters sharing a short GPU quota in this order (zen.scaling.manager.ClusterOrchestrator.tick):
-- in the configuration's, the cluster listed first took the room at every tick, and an older job of higher priority
-- of a cluster listed after it waited while the first cluster's newer jobs got VMs.
SELECT DISTINCT ON (cluster) cluster, priority, queued_at AS oldest
FROM jobs
WHERE status = 'QUEUED' AND cluster = ANY(CAST(:clusters AS text[]))
ORDER BY cluster, priority DESC, queued_at;

-- name: see_mig_instances
-- Every instance of one MIG seen now: first sight recorded once (with :model, the pool's provisioning model
-- then: migration 0037; again when its VM starts a billed segment: one its MIG recreated under the same name boots
-- from the MIG's template then, another model's after the cluster's models were reordered), and the first sight of its VM billed (:billed, those of :names GCE bills now:
-- running_at, migration 0034); returns when each was first seen. One seen billed before and not now (its
-- VM ended: a preempted spot VM its MIG recreates under the same name) closes that billed segment at its last
-- billed sight (billed_before, migration 0043); its next VM's RUNNING opens a new one.
-- usd_per_hour (migration 0056): the pool's price when a billed segment begins (:fixed, a configured price, else the
-- catalog's stored one where :use_catalog, else the snapshot's :fallback; NULL: unpriced then), kept with it (an
-- ended segment's as the fourth element of its billed_before entry): GCE billed the VM at the price of that time.
-- The fifth: the first sight of it unbilled, after which its VM was stopped (a silent job's: vm_stop_seen).
-- DISTINCT: a listing may name an instance twice, and ON CONFLICT may not touch one row twice.
INSERT INTO mig_instances (name, cluster, region, first_seen_at, last_seen_at, running_at, model, usd_per_hour)
SELECT name, :cluster, :region, :now, :now,
       CASE WHEN name = ANY(CAST(:billed AS text[])) THEN CAST(:now AS timestamptz) END, CAST(:model AS text),
       CASE WHEN name = ANY(CAST(:billed AS text[])) THEN price.usd END
FROM (SELECT DISTINCT unnest(CAST(:names AS text[])) AS name) AS listed,
     (SELECT COALESCE(CAST(:fixed AS double precision),
                      (SELECT p.usd_per_hour FROM vm_prices p
                       WHERE CAST(:use_catalog AS boolean) AND p.machine_type = CAST(:machine_type AS text)
                         AND p.region = split_part(CAST(:region AS text), '/', 1) AND p.model = CAST(:model AS text)),
                      CAST(:fallback AS double precision)) AS usd) AS price
ON CONFLICT (name) DO UPDATE SET
    last_seen_at = EXCLUDED.last_seen_at,
    running_at = CASE WHEN EXCLUDED.running_at IS NOT NULL THEN COALESCE(mig_instances.running_at, EXCLUDED.running_at) END,
    model = CASE WHEN mig_instances.running_at IS NULL AND EXCLUDED.running_at IS NOT NULL
                 THEN COALESCE(EXCLUDED.model, mig_instances.model) ELSE mig_instances.model END,
    usd_per_hour = CASE WHEN mig_instances.running_at IS NULL AND EXCLUDED.running_at IS NOT NULL
                        THEN EXCLUDED.usd_per_hour WHEN EXCLUDED.running_at IS NOT NULL THEN mig_instances.usd_per_hour END,
    billed_before = CASE WHEN mig_instances.running_at IS NOT NULL AND EXCLUDED.running_at IS NULL
                         THEN COALESCE(mig_instances.billed_before, '[]'::jsonb)
                              || jsonb_build_array(jsonb_build_array(mig_instances.running_at, mig_instances.last_seen_at,
                                                                     mig_instances.model, mig_instances.usd_per_hour,
                                                                     EXCLUDED.last_seen_at))
                         ELSE mig_instances.billed_before END
RETURNING name, first_seen_at;

-- name: mig_instance_names
-- Every instance the MIGs listed at the last scaling passes, newest first: the VMs whose control
-- subscriptions Zen makes (zen.adapters.control_subscriptions), each granted to the account of its region.
SELECT name, cluster, region FROM mig_instances ORDER BY first_seen_at DESC;

-- name: control_vms_gone
-- VMs a pass saw in a MIG since :since and no MIG lists now (left: zen.adapters.control_subscriptions deletes their
-- control subscriptions, which an instance of the tick before the current one made). By the last_seen_at index.
SELECT DISTINCT l.name, l.cluster, l.region FROM vm_lifetimes l
WHERE l.last_seen_at > :since AND NOT EXISTS (SELECT 1 FROM mig_instances m WHERE m.name = l.name);

-- name: control_vms_left
-- Those of :names whose latest lifetime a pass saw leave its MIG (left_at, migration 0062; NULL: kept by the release
-- before it): not one forgotten unseen (-infinity: a dropped pool's, zen.store.fleet.forget_dropped_pools, by a
-- function instance whose configuration lacks a pool another one's has), whose VM may still run and be listed again.
SELECT name FROM (SELECT DISTINCT ON (name) name, left_at FROM vm_lifetimes
                  WHERE name = ANY(CAST(:names AS text[])) ORDER BY name, last_seen_at DESC) AS latest
WHERE left_at IS DISTINCT FROM CAST('-infinity' AS timestamptz);

-- name: held_vms_of_cluster
-- VMs that hold a job (vm_holders, migration 0045: a gang's nodes, and not a RETIRED VM whose stopping job says its
-- container may still run, :left_running): never removed.
SELECT vm, job_id FROM vm_holders(:left_running) WHERE cluster = :cluster;

-- name: vms_of_cluster
-- shares: its agent may run several jobs at once (its heartbeats list them all, none included: zen.scaling.sharing);
-- job_ended_at: when Zen recorded the end of the job its agent says it runs, if it ended (a VM that never heard its
-- STOPs: vms.leftovers): its row's last change, not its finished_at, which a final report read late puts earlier
-- (its publish time: zen.core.report_end), while the VM's next heartbeat, saying it is idle, may not be read yet;
-- running_at: when a scaling pass first saw its VM RUNNING (a flex-start VM's run counts from it: zen.scaling.flexrun);
-- model: the one a scaling pass recorded for it, as vm_model reads it (a flex-start VM of a primary MIG whose
-- cluster's models were reordered, or lost flex-start, since is still one: zen.scaling.flexrun)
SELECT vms.name, vms.state, vms.job_id, vms.idle_since, vms.last_seen_at, vms.first_seen_at,
       vms.jobs IS NOT NULL AS shares,
       (SELECT j.updated_at FROM jobs j WHERE j.job_id = vms.job_id AND j.finished_at IS NOT NULL) AS job_ended_at,
       m.running_at, CASE WHEN m.running_at IS NULL AND m.billed_before IS NOT NULL THEN NULL ELSE m.model END AS model
FROM vms LEFT JOIN mig_instances m ON m.name = vms.name
WHERE vms.cluster = :cluster;

-- name: read_tick_clock
-- The scale tick's clock as the last tick left it (record_tick): a scaling pass's judge of agents' silence.
SELECT last_at, interval_s, back_at FROM tick_clock;

-- name: drained_vms_of_cluster
-- Drained by a scale-down (claims refused); the mark goes when the instance leaves its MIG
-- (forget_vanished_instances), so a row here whose instance is still listed is a delete that failed.
SELECT name FROM vm_drains WHERE cluster = :cluster;

-- name: scaling_memory
SELECT region, memory FROM scaling_memory WHERE cluster = :cluster;

-- name: last_scaling_pass
SELECT max(updated_at) AS at FROM scaling_memory WHERE cluster = :cluster;

-- name: save_scaling_memory
INSERT INTO scaling_memory (cluster, region, memory, updated_at)
VALUES (:cluster, :region, CAST(:memory AS jsonb), :now)
ON CONFLICT (cluster, region) DO UPDATE SET memory = EXCLUDED.memory, updated_at = EXCLUDED.updated_at;

-- name: keep_request_failure
-- A failed flex-start request a pass read and dropped unplanned (zen.scaling.reported): the next pass plans it.
INSERT INTO unplanned_request_failures (cluster, pool, failure, kept_at)
VALUES (:cluster, :pool, CAST(:failure AS jsonb), :now);

-- name: kept_request_failures
SELECT id, pool, failure FROM unplanned_request_failures WHERE cluster = :cluster ORDER BY id;

-- name: forget_request_failures
-- Planned: deleted with the memory that holds their strikes (one transaction).
DELETE FROM unplanned_request_failures WHERE cluster = :cluster AND id = ANY(CAST(:ids AS bigint[]));

-- name: forget_vanished_instances
-- Instances no longer in their MIG: forget their first-seen time, drain mark and VM row; keep when
-- they were seen (vm_lifetimes: the fleet's VM-hours in `zen usage --by region`), and :left_at, when a pass saw them
-- gone (migration 0062; NULL: a dropped pool's, forgotten unseen: zen.store.fleet.forget_dropped_pools, kept as
-- -infinity, never seen go: a NULL is a lifetime the release before 0062 kept, vm_stop_seen). Returns their names.
WITH gone AS (
    DELETE FROM mig_instances
    WHERE cluster = :cluster AND region = :region AND NOT (name = ANY(CAST(:present AS text[])))
    RETURNING name, cluster, region, first_seen_at, last_seen_at, running_at, model, billed_before, usd_per_hour
), lived AS (
    INSERT INTO vm_lifetimes (name, cluster, region, first_seen_at, last_seen_at, running_at, model, billed_before,
                              usd_per_hour, left_at)
    SELECT name, cluster, region, first_seen_at, last_seen_at, running_at, model, billed_before, usd_per_hour,
           COALESCE(CAST(:left_at AS timestamptz), '-infinity')
    FROM gone
    ON CONFLICT (name, first_seen_at) DO NOTHING
), undrained AS (
    DELETE FROM vm_drains WHERE name IN (SELECT name FROM gone)
), unheard AS (
    DELETE FROM vms WHERE name IN (SELECT name FROM gone)
)
SELECT name FROM gone ORDER BY name;

-- name: fleet_pools
-- Every (cluster, pool) the fleet's rows name: listed instances, and the planner's memory.
SELECT cluster, region FROM mig_instances UNION SELECT cluster, region FROM scaling_memory;

-- name: forget_pool_memory
DELETE FROM scaling_memory WHERE cluster = :cluster AND region = :region;

-- name: lock_job_id
-- Serialises the submissions that may make a job of this id (an array and its task 0 go under two: ArrayJobs.submit).
SELECT pg_advisory_xact_lock(hashtext('zen-job-id:' || :job_id));

-- name: lock_vm
-- Serialises a claim by a VM with its scale-down (see ClusterManager and JobService).
SELECT pg_advisory_xact_lock(hashtext('zen-vm:' || :vm_name));

-- name: vm_is_draining
-- Drained by a scale-down, or retired by its agent (a pull limit reached: it is deleted next) after the claim's
-- :seq was drawn (agents draw seqs from one counter of epoch milliseconds, and a RETIRED agent claims no more:
-- a claim drawn after the word is a new agent's, its VM recreated by its MIG after a preemption, or restarted: the
-- same VM's, by its token's creation time, is refused all the same, vm_retired_before),
-- or gone: a scaling pass saw it leave its MIG (forget_vanished_instances, its drain mark with it) and none has
-- listed it since, so a claim from it was sent before it went and delivered late (a new VM given a gone one's
-- name, 4 random characters of GCE's, is refused so until a pass lists it: a tick at most, its boot takes longer).
SELECT 1 AS draining FROM vm_drains WHERE name = :vm_name
UNION ALL SELECT 1 FROM vms WHERE name = :vm_name AND state = 'RETIRED' AND last_seq > :seq
UNION ALL SELECT 1 FROM vm_lifetimes WHERE name = :vm_name
  AND NOT EXISTS (SELECT 1 FROM mig_instances WHERE name = :vm_name);

-- name: vm_outside_mig
-- A VM a pass saw leave its MIG (its latest lifetime's left_at, migration 0062: not a dropped pool's, -infinity)
-- before :sent_before, which no MIG lists again: heard since, it runs outside its MIG (abandoned), and no pass
-- deletes it (zen.jobs.vm_beats.VmBeats.outside_mig). When it left, and its price then (NULL: unpriced).
SELECT left_at, usd_per_hour FROM (SELECT left_at, usd_per_hour FROM vm_lifetimes WHERE name = :vm_name
                                   ORDER BY first_seen_at DESC LIMIT 1) AS latest
WHERE left_at > CAST('-infinity' AS timestamptz) AND left_at < :sent_before
  AND NOT EXISTS (SELECT 1 FROM mig_instances WHERE name = :vm_name);

-- name: vm_retired_as
-- The VM of the creation time :created (its token's: zen.core.incarnation) said RETIRED: kept whatever the seq (a
-- RETIRED delivered after a later heartbeat still tells that VM retired), and through its later heartbeats of other
-- states (an agent restarted without its retirement says IDLE again: zen.agent.retired; repository.upsert_vm records
-- that VM's every later word as RETIRED, so the scaling pass deletes it as retired and never counts it idle).
UPDATE vms SET retired_created_at = :created WHERE name = :vm_name;

-- name: vm_retired_before
-- Whether the VM of the creation time :created said RETIRED before (vm_retired_as): a claim of its is refused. NULL
-- :created (VM proof off) matches nothing.
SELECT 1 AS retired FROM vms WHERE name = :vm_name AND retired_created_at = CAST(:created AS timestamptz);

-- name: vm_run_marks
-- When a VM's agent was first heard, and when a scaling pass first saw its VM RUNNING (see_mig_instances): a
-- flex-start VM's run counts from the earlier (zen.core.provisioning.flex_run_left_s).
SELECT (SELECT first_seen_at FROM vms WHERE name = :vm_name) AS first_seen_at,
       (SELECT running_at FROM mig_instances WHERE name = :vm_name) AS running_at;

-- name: vm_stop_seen
-- How a scaling pass saw a VM stop after :since (a silent job's last report: zen.jobs.cloud_silence), none of Zen's
-- doing (Zen deletes only drained VMs, and drains none that holds a job: drain_unless_busy). Still in its MIG and not
-- drained: listed unbilled by a pass after :since (running_at NULL), or billed again (its MIG recreated it) after a
-- segment (billed_before, migration 0043) first seen unbilled after :since (its fifth element; an entry kept before
-- it, whose last billed sight was after :since); the model and start of the segment that ended. Gone from its MIG
-- (forget_vanished_instances; its latest lifetime), a pass having seen it go after :since (left_at, migration 0062: not
-- a dropped pool's VM, forgotten as it ran and heard after, whose later silence no pass saw: -infinity), or a lifetime
-- kept by the release before 0062 (left_at NULL: before the upgrade, or by its passes still deployed between `zen db
-- migrate` and `terraform apply`), read as that release read it, seen leave: its model and when a pass first saw it
-- RUNNING.
SELECT CASE WHEN m.running_at IS NULL THEN m.model ELSE COALESCE(m.billed_before -> -1 ->> 2, m.model) END AS model,
       CAST(m.billed_before -> -1 ->> 0 AS timestamptz) AS running_at, FALSE AS left_mig
FROM mig_instances m
WHERE m.name = :vm_name AND NOT EXISTS (SELECT 1 FROM vm_drains d WHERE d.name = m.name)
  AND ((m.running_at IS NULL AND m.last_seen_at > :since)
       OR CAST(COALESCE(m.billed_before -> -1 ->> 4, m.billed_before -> -1 ->> 1) AS timestamptz) >= :since)
UNION ALL
(SELECT l.model, COALESCE(l.running_at, CAST(l.billed_before -> 0 ->> 0 AS timestamptz)), TRUE
 FROM vm_lifetimes l
 WHERE l.name = :vm_name AND l.first_seen_at <= :since AND (l.left_at > :since OR l.left_at IS NULL)
   AND NOT EXISTS (SELECT 1 FROM mig_instances WHERE name = :vm_name)
 ORDER BY l.first_seen_at DESC LIMIT 1);

-- name: vm_model
-- The provisioning model a scaling pass recorded for a VM when it first listed it (mig_instances.model, what its
-- fleet dollars are priced at): a VM keeps it when the cluster's models are reordered and its MIG's name means another.
-- NULL (its name tells: zen.jobs.claims) once a pass saw that VM stop and none has seen the next billed (running_at
-- NULL after a billed segment, billed_before): the model is the ended VM's, and the VM its MIG recreates under the
-- name boots from the MIG's template now, whose agent may claim before a pass records it (a spot VM, after the
-- models were reordered, was taken for the standard one before it, and confirmed a job accepting standard only).
-- Not NULL where that stop was seen after :ran_from (an attempt's start on the VM: zen.jobs.flex_end): the VM that
-- ran it is the one that ended, of the model recorded.
SELECT CASE WHEN running_at IS NULL AND billed_before IS NOT NULL
             AND NOT COALESCE(CAST(billed_before -> -1 ->> 4 AS timestamptz) > CAST(:ran_from AS timestamptz), false)
            THEN NULL ELSE model END AS model
FROM mig_instances WHERE name = :vm_name;

-- name: vm_shares
-- Whether a VM's agent may run several jobs at once (its heartbeats list them all: zen.scaling.sharing).
SELECT jobs IS NOT NULL AS shares FROM vms WHERE name = :vm_name;

-- name: vm_holds_job
-- Whether a job holds the VM, as held_vms_of_cluster reads it (vm_holders): its drain before a delete.
SELECT job_id FROM vm_holders(:left_running) WHERE vm = CAST(:vm_name AS text) LIMIT 1;

-- name: jobs_on_vm
-- The jobs a VM holds (a claim from it is checked against them: zen.jobs.claims). The partial vm index's.
SELECT job_id, gpus FROM jobs WHERE vm = :vm_name AND status IN ('ASSIGNED','RUNNING','STOPPING');

-- name: vm_loads_of_cluster
-- Per VM of a cluster that holds jobs: how many, and the GPUs they hold (VMs with room: zen.scaling.sharing).
SELECT vm, count(*) AS jobs, CAST(sum(gpus) AS integer) AS gpus FROM jobs
WHERE cluster = :cluster AND status IN ('ASSIGNED','RUNNING','STOPPING') AND vm IS NOT NULL
GROUP BY vm;

-- name: queued_demand_by_gpus
-- queued_demand, split by the GPUs each job holds (a cluster whose VMs take several jobs at once).
-- A narrowed job (zen.core.routing) counts only in the regions its start reaches, as in queued_demand. A gang
-- (nodes > 1) is no demand here (zen.scaling.fleetdb.pools_of_row: such a cluster cannot hold one).
SELECT priority, COALESCE(start_regions, regions) AS regions, provisioning, max_start_wait_s,
       checkpoint_every_s, gpus, count(*) AS jobs, min(queued_at) AS oldest,
       max(named_max_runtime_s) AS longest, nodes,
       queued_at <= CAST(:now AS timestamptz) - COALESCE(max_start_wait_s, CAST(:bound AS integer)) * interval '1 second' AS late
FROM jobs
WHERE cluster = :cluster AND status = 'QUEUED'
GROUP BY priority, COALESCE(start_regions, regions), provisioning, max_start_wait_s, checkpoint_every_s, gpus, nodes,
         late;

-- name: drain_vm
INSERT INTO vm_drains (name, cluster, region, at) VALUES (:vm_name, :cluster, :region, :now)
ON CONFLICT (name) DO NOTHING;

-- name: insert_scaling_decision
INSERT INTO scaling_decisions (at, cluster, region, action, count, vm, reason)
VALUES (:now, :cluster, :region, :action, :count, :vm, :reason);

-- name: recent_scaling_decisions
SELECT at, cluster, region, action, count, vm, reason FROM scaling_decisions
WHERE (CAST(:cluster AS text) IS NULL OR cluster = :cluster)
ORDER BY id DESC LIMIT :limit;

-- name: try_cluster_lock
SELECT pg_try_advisory_lock(hashtext('zen-scale:' || :cluster)) AS locked;

-- name: cluster_unlock
SELECT pg_advisory_unlock(hashtext('zen-scale:' || :cluster)) AS unlocked;

-- name: arrivals_since
-- Jobs submitted since that were admitted (queued_at set): a job waiting on its queue's quota, or
-- cancelled while it waited, is no demand for the warm pool (zen.scaling.planner.shrink_idle).
SELECT count(*) AS n FROM jobs WHERE cluster = :cluster AND submitted_at > :since AND queued_at IS NOT NULL;

-- name: list_mig_instances
SELECT name, cluster, region, first_seen_at FROM mig_instances ORDER BY cluster, region, name;

-- name: all_job_events
-- Every job's history, in order (the demo's summary; tests).
SELECT job_id, at, actor, attempt, from_status, to_status, reason FROM job_events ORDER BY id;

-- name: queue_lock
-- Admission for a cohort (or a lone queue) one transaction at a time; released at commit.
SELECT pg_advisory_xact_lock(hashtext('zen-queue:' || :key)) IS NULL AS locked;

-- name: admitted_gpus
-- GPUs each queue holds on one cluster: every status from admission to the end holds quota;
-- freeing: of those, held by STOPPING jobs, whether stopped for a preemption or by their user.
SELECT queue, CAST(SUM(gpus) AS integer) AS gpus, COUNT(*) AS jobs,
       CAST(COALESCE(SUM(gpus) FILTER (WHERE status = 'STOPPING'
                                       AND (preempted_by IS NOT NULL OR stop_reason IS NOT NULL)), 0) AS integer) AS freeing
FROM jobs
WHERE queue IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb))) AND cluster = :cluster
  AND status IN ('QUEUED', 'ASSIGNED', 'RUNNING', 'STOPPING', 'LOST') AND queue IS NOT NULL
GROUP BY queue;

-- name: waiting_line
-- A queue's waiting jobs in the order they are served (the console's queues page): those admitted (QUEUED:
-- quota held, a VM to start them is sought), then those an admission pass reads (PENDING, no hold) in its
-- order (pending_of_queue: priority, then submitted first, then job id), then those held (an array's
-- max_parallel, a retry's backoff, an --after), which no pass reads until their hold lifts; :owner's alone
-- when given. waiting_total: every waiting job the viewer sees there.
SELECT *, COUNT(*) OVER () AS waiting_total FROM jobs
WHERE queue = :queue AND status IN ('PENDING', 'QUEUED')
  AND (CAST(:owner AS text) IS NULL OR lower(user_id) = lower(:owner))
ORDER BY CASE WHEN status = 'QUEUED' THEN 0 WHEN hold IS NULL THEN 1 ELSE 2 END, priority DESC, submitted_at, job_id
LIMIT :limit;

-- name: pending_of_queue
-- A queue's waiting jobs of one cluster in admission order; rows another transaction holds are
-- skipped (a stop being applied, a late report of a preempted attempt): the admission pass never
-- waits on a job while holding the lock. Jobs larger than the queue can now ever hold (its quota
-- lowered since) are left out: they wait without blocking the jobs behind them. ahead: the row's
-- place in the line read without locks (held rows included), so the caller admits only the rows
-- with none skipped before them: a job held elsewhere is never jumped (its queue waits for the next
-- pass). The line is the first :limit by the index; the lock re-checks each row's status.
WITH line AS (
    SELECT job_id, row_number() OVER (ORDER BY priority DESC, submitted_at, job_id) - 1 AS ahead
    FROM (SELECT job_id, priority, submitted_at FROM jobs
          WHERE queue = :queue AND cluster = :cluster AND status = 'PENDING' AND queue IS NOT NULL
            AND hold IS NULL AND gpus <= :most
          ORDER BY priority DESC, submitted_at, job_id
          LIMIT :limit) AS first)
SELECT jobs.*, line.ahead FROM jobs JOIN line ON line.job_id = jobs.job_id
WHERE jobs.status = 'PENDING'
ORDER BY line.ahead
FOR UPDATE OF jobs SKIP LOCKED;

-- name: preemption_candidates
-- Admitted jobs of these queues that a preemption may take back, the cheapest first (lowest priority,
-- then the most recently admitted), the first :limit of each queue (a queue back at its quota supplies no
-- more: the first :limit of all of them could be one queue's); rows locked elsewhere are skipped. ahead:
-- the row's place read without locks, so the caller takes only those with none skipped before them (a
-- cheapest job held by its own end or stop was passed over, and a dearer one stopped in its place).
WITH ranked AS (
    SELECT job_id, row_number() OVER (ORDER BY priority, queued_at DESC, job_id DESC) - 1 AS ahead
    FROM jobs
    WHERE job_id IN (SELECT cheapest.job_id FROM jsonb_array_elements_text(CAST(:queues AS jsonb)) AS member(name),
                     LATERAL (SELECT job_id FROM jobs
                              WHERE queue = member.name AND cluster = :cluster
                                AND status IN ('QUEUED', 'ASSIGNED', 'RUNNING') AND preempted_by IS NULL
                              ORDER BY priority, queued_at DESC, job_id DESC LIMIT :limit) AS cheapest))
SELECT jobs.*, ranked.ahead FROM jobs JOIN ranked ON ranked.job_id = jobs.job_id
WHERE jobs.status IN ('QUEUED', 'ASSIGNED', 'RUNNING') AND jobs.preempted_by IS NULL
ORDER BY ranked.ahead
FOR UPDATE OF jobs SKIP LOCKED;

-- name: waiting_queues
-- (queue, cluster) pairs with waiting jobs: the tick's admission passes.
SELECT DISTINCT queue, cluster FROM jobs WHERE status = 'PENDING' AND queue IS NOT NULL AND hold IS NULL;

-- name: queue_head
-- The first waiting job of a queue on a cluster, in admission order, of at most :most GPUs, read without a lock
-- (zen explain: a lender's job a borrower waits behind).
SELECT job_id, gpus FROM jobs
WHERE queue = :queue AND cluster = :cluster AND status = 'PENDING' AND queue IS NOT NULL AND hold IS NULL
  AND gpus <= :most
ORDER BY priority DESC, submitted_at, job_id
LIMIT 1;

-- name: jobs_ahead
-- Waiting jobs a PENDING job waits behind in its queue (higher priority, or same and older); not those larger
-- than the queue can now ever hold (:most), which hold nobody up (pending_of_queue leaves them out).
SELECT COUNT(*) AS n FROM jobs
WHERE queue = :queue AND cluster = :cluster AND status = 'PENDING' AND queue IS NOT NULL AND hold IS NULL
  AND gpus <= :most AND (priority > :priority OR (priority = :priority AND (submitted_at, job_id) < (:submitted_at, :job_id)));

-- name: queue_usage
SELECT queue, cluster, gpu_seconds, updated_at FROM queue_usage
WHERE queue IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb)));

-- name: save_queue_usage
INSERT INTO queue_usage (queue, cluster, gpu_seconds, updated_at) VALUES (:queue, :cluster, :gpu_seconds, :now)
ON CONFLICT (queue, cluster) DO UPDATE SET gpu_seconds = EXCLUDED.gpu_seconds, updated_at = EXCLUDED.updated_at;

-- name: queue_counts
-- Per queue and cluster: jobs and GPUs by status group (``zen queues``, the console's queues page every few seconds).
-- The waiting and the admitted read apart, each through a partial index of its statuses (jobs_active,
-- jobs_admitted_by_queue): one filter over all six statuses matched neither index, and Postgres read every job ever
-- submitted, ended ones included, at each refresh.
SELECT queue, cluster,
       COUNT(*) FILTER (WHERE status = 'PENDING') AS pending,
       COUNT(*) FILTER (WHERE status IN ('QUEUED', 'ASSIGNED', 'LOST')) AS admitted_waiting,
       COUNT(*) FILTER (WHERE status IN ('RUNNING', 'STOPPING')) AS running,
       CAST(COALESCE(SUM(gpus) FILTER (WHERE status IN ('QUEUED', 'ASSIGNED', 'RUNNING', 'STOPPING', 'LOST')), 0)
            AS integer) AS admitted_gpus
FROM (SELECT queue, cluster, status, gpus FROM jobs WHERE status = 'PENDING' AND queue IS NOT NULL
      UNION ALL
      SELECT queue, cluster, status, gpus FROM jobs
      WHERE status IN ('QUEUED', 'ASSIGNED', 'RUNNING', 'STOPPING', 'LOST') AND queue IS NOT NULL) AS live
GROUP BY queue, cluster;

-- name: insert_attempt_usage
-- The usage of an attempt that just ended (zen.store.usage), in the transaction that ends it. It
-- started when its VM claimed it (that attempt's last ASSIGNED history row, written in this
-- transaction or earlier: a claim its VM gave back unanswered requeues the same attempt, and the
-- claim that ran it is the last), else when it began running (an agent's clock never moves the start
-- before Zen's claim: queue time is not usage); gpu_seconds = gpus x wall time on the VM (x :gpu_factor: a
-- gang's nodes that ended before it, zen.jobs.decisions).
-- Its price per VM-hour (zen.core.prices.AttemptPrice): each of its VMs (:vms, a gang's nodes) as the scaling passes
-- saw it billed (mig_instances: the billed segment its start falls in, an earlier one's kept in billed_before for a
-- VM its MIG recreated since, not one a pass saw end before it; else vm_lifetimes once it left its MIG): that
-- segment's model and the price kept with it (migration 0056: what the fleet's dollars bill the VM at, so an attempt
-- is its share of its VM's cost, whatever price the catalog's refresh or an override set while it ran); a VM no pass
-- saw billed, or a segment kept without a price, as its name says (a primary pool's VM names no model), priced now:
-- at a configured price of that model, else the catalog's stored price of its pool, else the snapshot's; weighted by
-- each VM's share; unpriced where one is.
-- Its model: its VMs' (a gang's nodes' models, when they differ, in one name: spot+standard).
-- ON CONFLICT: the attempt is already counted (a redelivered or repeated end changes nothing).
INSERT INTO attempt_usage (job_id, attempt, user_id, queue, cluster, machine_type, region, vm, gpus, started_at,
                           ended_at, gpu_seconds, outcome, model, usd_per_hour)
SELECT :job_id, :attempt, :user_id, :queue, :cluster, :machine_type, :region, :vm, :gpus, s.started_at, s.ended_at,
       CAST(:gpus AS integer) * CAST(:gpu_factor AS double precision)
           * GREATEST(0, extract(epoch FROM s.ended_at - s.started_at)), :outcome, v.model, v.usd_per_hour
FROM (SELECT LEAST(COALESCE(claim.at, CAST(:ran_from AS timestamptz), t.ended_at), t.ended_at) AS started_at,
             t.ended_at
      FROM (SELECT CAST(:ended_at AS timestamptz) AS ended_at) AS t,
           (SELECT max(at) AS at FROM job_events
            WHERE job_id = :job_id AND attempt = :attempt AND to_status = 'ASSIGNED') AS claim) AS s,
     LATERAL (SELECT string_agg(DISTINCT n.model, '+') AS model,
             CASE WHEN bool_and(n.usd IS NOT NULL) THEN sum(n.share * n.usd) END AS usd_per_hour
      FROM (SELECT m.rank, m.share, m.model,
                   COALESCE(m.kept,
                            CAST(CAST(:fixed AS jsonb) ->> m.model AS double precision),
                            (SELECT p.usd_per_hour FROM vm_prices p
                             WHERE CAST(:use_catalog AS boolean) AND p.machine_type = :machine_type
                               AND p.region = :region AND p.model = m.model),
                            CAST(CAST(:fallback AS jsonb) ->> m.model AS double precision)) AS usd
            FROM (SELECT g.rank, g.share, COALESCE(k.model, g.model) AS model, k.usd AS kept
                  FROM jsonb_to_recordset(CAST(:vms AS jsonb))
                       AS g(rank integer, vm text, model text, share double precision)
                  -- the VM's row (in its MIG, else the last one that left it): of its billed segments not seen ended
                  -- by the attempt's start (a pass saw that VM stopped first, billed_before's fifth element: the start
                  -- is a later VM's, its MIG's recreation of it, claimed before a pass saw it billed), the last begun
                  -- by then (its VM then), else the first (claimed before a pass saw its VM billed); were every one
                  -- seen ended by then, the last begun by then; that segment's model (else the row's) and its kept price
                  LEFT JOIN LATERAL (
                      SELECT COALESCE(seg.model, r.model) AS model, seg.usd
                      FROM (SELECT billed_before, running_at, model, usd_per_hour, 0 AS gone, first_seen_at
                            FROM mig_instances WHERE name = g.vm AND model IS NOT NULL
                            UNION ALL
                            SELECT billed_before, running_at, model, usd_per_hour, 1, first_seen_at
                            FROM vm_lifetimes WHERE name = g.vm AND model IS NOT NULL) AS r
                           LEFT JOIN LATERAL (
                               SELECT e.model, e.usd FROM (
                                   SELECT CAST(x ->> 0 AS timestamptz) AS since, x ->> 2 AS model,
                                          CAST(x ->> 3 AS double precision) AS usd, CAST(x ->> 4 AS timestamptz) AS ended
                                   FROM jsonb_array_elements(COALESCE(r.billed_before, '[]'::jsonb)) AS x
                                   UNION ALL SELECT r.running_at, r.model, r.usd_per_hour, NULL
                                   WHERE r.running_at IS NOT NULL
                               ) AS e
                               ORDER BY COALESCE(e.ended <= s.started_at, false), e.since <= s.started_at DESC,
                                        CASE WHEN e.since <= s.started_at THEN e.since END DESC, e.since
                               LIMIT 1) AS seg ON true
                      ORDER BY r.gone, r.first_seen_at DESC LIMIT 1) AS k ON true) AS m) AS n) AS v
ON CONFLICT (job_id, attempt) DO NOTHING
RETURNING job_id;

-- name: share_attempt_vm
-- An attempt that shared its VM with others (max_jobs_per_vm > 1) is charged its share of the VM's time.
UPDATE attempt_usage SET vm_share = :vm_share WHERE job_id = :job_id AND attempt = :attempt;

-- name: ask_scaling_pass
-- A pass found the cluster's lock held: count the ask (zen.scaling.asks); returns the new count.
INSERT INTO scaling_pass_asks (cluster, asks) VALUES (:cluster, 1)
ON CONFLICT (cluster) DO UPDATE SET asks = scaling_pass_asks.asks + 1
RETURNING asks;

-- name: scaling_pass_asks
SELECT asks FROM scaling_pass_asks WHERE cluster = :cluster;

-- name: array_let_go
-- An array's tasks let go (no hold, or a retry's backoff: hold_until) and not ended: what its max_parallel
-- counts (zen.jobs.arrays).
SELECT count(*) AS n FROM jobs
WHERE array_id = :array_id AND (hold IS NULL OR hold_until IS NOT NULL)
  AND status IN ('PENDING','QUEUED','ASSIGNED','RUNNING','STOPPING','LOST');

-- name: array_next_held
-- The array's held task of the lowest index, locked (a concurrent release of the same task waits, then
-- finds it let go and returns nothing: the tick's sweep lets the next one go).
SELECT * FROM jobs
WHERE array_id = :array_id AND status = 'PENDING' AND hold LIKE 'array %'
ORDER BY CAST(request -> 'array' ->> 'index' AS integer)
LIMIT 1
FOR UPDATE;

-- name: arrays_holding
-- Arrays with held tasks and room under their max_parallel (as array_let_go counts), for the tick's sweep (a
-- release two concurrent ends both reached for): those without room are left out, so that however many
-- there are they never fill the window.
SELECT h.array_id FROM (SELECT array_id, max(CAST(request -> 'array' ->> 'max_parallel' AS integer)) AS most
                        FROM jobs WHERE array_id IS NOT NULL AND status = 'PENDING' AND hold LIKE 'array %'
                        GROUP BY array_id) AS h
WHERE (SELECT count(*) FROM jobs t WHERE t.array_id = h.array_id AND (t.hold IS NULL OR t.hold_until IS NOT NULL)
         AND t.status IN ('PENDING','QUEUED','ASSIGNED','RUNNING','STOPPING','LOST')) < h.most
ORDER BY h.array_id
LIMIT :limit;

-- name: waiting_after
-- PENDING jobs held by dependencies that name one of :names (zen.core.dependencies), as submitted (an array's tasks by
-- index, so its first let go are its first: by job_id, arr-10 went before arr-2), locked together with every job
-- their moves may move.
-- reached: they, the jobs waiting for them, and so on (a job cancelled here moves those waiting for it, in this
-- transaction).
WITH RECURSIVE reached (job_id, array_id) AS (
    SELECT job_id, array_id FROM jobs
    WHERE status = 'PENDING' AND hold IS NOT NULL AND hold LIKE 'after: %'
      AND (request -> 'after') ?| ARRAY(SELECT jsonb_array_elements_text(CAST(:names AS jsonb)))
  UNION
    SELECT j.job_id, j.array_id FROM reached
    JOIN jobs j ON j.status = 'PENDING' AND j.hold IS NOT NULL AND j.hold LIKE 'after: %'
               AND (j.request -> 'after') ?| ARRAY[reached.job_id, COALESCE(reached.array_id, reached.job_id)]
),
-- locked: all of them, in one order (as submitted), before any moves, so two ends at once that move some of the same
-- jobs go one after the other. Each locking its own first and theirs later, they deadlocked (a's end held b and d
-- and waited for c, b's, while x's held c and waited for d) and Postgres failed one of the two reports.
locked AS MATERIALIZED (
    SELECT * FROM jobs
    WHERE job_id IN (SELECT job_id FROM reached) AND status = 'PENDING' AND hold IS NOT NULL AND hold LIKE 'after: %'
    ORDER BY submitted_at, job_id
    FOR UPDATE
)
-- Those waiting for :names themselves: the caller moves them, and each move looks at its own.
SELECT * FROM locked
WHERE (request -> 'after') ?| ARRAY(SELECT jsonb_array_elements_text(CAST(:names AS jsonb)))
ORDER BY submitted_at, job_id;

-- name: held_after
-- Jobs held by dependencies that may move now (zen.core.dependencies.verdict: every one ended, or, with
-- after_condition ok, one ended otherwise than SUCCEEDED or is gone), the oldest first: the tick looks at them
-- again (no lock: re-read under one). Those surely still waiting are left out, so that however many of them
-- there are they never fill the window (a job whose dependency ended as it was submitted waited for ever).
SELECT j.job_id FROM jobs j,
     LATERAL (SELECT bool_or(dep.unended) AS unended, bool_or(NOT dep.unended AND NOT dep.succeeded) AS otherwise
              FROM (SELECT EXISTS (SELECT 1 FROM jobs d WHERE d.job_id = name.id
                                   AND d.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED'))
                           OR EXISTS (SELECT 1 FROM jobs d WHERE d.array_id = name.id
                                      AND d.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')) AS unended,
                           (EXISTS (SELECT 1 FROM jobs d WHERE d.job_id = name.id)
                            OR EXISTS (SELECT 1 FROM jobs d WHERE d.array_id = name.id))
                           AND NOT EXISTS (SELECT 1 FROM jobs d WHERE d.job_id = name.id AND d.status <> 'SUCCEEDED')
                           AND NOT EXISTS (SELECT 1 FROM jobs d WHERE d.array_id = name.id
                                           AND d.status <> 'SUCCEEDED') AS succeeded
                    FROM jsonb_array_elements_text(j.request -> 'after') AS name(id)) AS dep) AS deps
WHERE j.status = 'PENDING' AND j.hold IS NOT NULL AND j.hold LIKE 'after: %'
  AND (NOT COALESCE(deps.unended, false)
       OR COALESCE(deps.otherwise, false) AND COALESCE(j.request ->> 'after_condition', 'ok') = 'ok')
ORDER BY j.submitted_at, j.job_id
LIMIT :limit;

-- name: retry_due
-- Jobs whose retry's backoff is over (zen.core.retries), the longest due first; re-read under lock. Those whose hold
-- starts with :kind (a LIKE prefix) when :of_kind, else the others: one kind of hold does not wait behind another.
SELECT job_id FROM jobs WHERE status = 'PENDING' AND hold_until IS NOT NULL AND hold_until <= :now
  AND (COALESCE(hold, '') LIKE :kind) = :of_kind
ORDER BY hold_until, job_id
LIMIT :limit;

-- name: array_end
-- How an array stands for the jobs waiting for it (zen.jobs.decisions._ends): its tasks, those not ended, and
-- the status of the first that did not succeed; counted here (jobs_by_array), not read task by task.
SELECT count(*) AS tasks, count(*) FILTER (WHERE status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')) AS unended,
       (array_agg(status ORDER BY CAST(request -> 'array' ->> 'index' AS integer))
            FILTER (WHERE status <> 'SUCCEEDED'))[1] AS first_other
FROM jobs WHERE array_id = :array_id;

-- name: ids_taken
-- Those of :ids a job or an array holds (zen submit --array checks its task ids before publishing).
SELECT job_id AS id FROM jobs WHERE job_id = ANY(CAST(:ids AS text[]))
UNION SELECT array_id FROM jobs WHERE array_id = ANY(CAST(:ids AS text[]));

-- name: arrays_named
-- Those of :names that are an array's id (a new array's task ids must not be: jobs_by_array).
SELECT DISTINCT array_id FROM jobs WHERE array_id = ANY(CAST(:names AS text[]));

-- name: array_tasks
-- An array's tasks in index order (the CLI's list and progress; a stop of the array).
SELECT * FROM jobs WHERE array_id = :array_id ORDER BY CAST(request -> 'array' ->> 'index' AS integer);
