-- One group role per core function (issue 34), each granted what that function's SQL needs and nothing
-- more. Deployed, each function logs in as its own IAM database user, a member of its role alone
-- (terraform/outputs.tf: db_grants_sql); the local stack's functions log in as login users of these
-- roles too (zen_dev.local.stack). The matrix, why each grant is there, and what the roles still allow:
-- docs/explanations/security.md#database-roles. tests/test_function_roles.py reads the catalog and fails
-- on any difference from its own copy of the matrix, so a later migration that adds a table (or a
-- query that needs more) says here what each role gets: these roles get no default privileges.
--
--   zen_submitter  on_job_submitted   inserts jobs; runs admission, routing and a scaling pass
--   zen_heartbeat  on_heartbeat       records VMs' reports, their attempts' usage; runs a scaling pass
--   zen_stopper    on_stop_requested  records stops (early ones too); no scaling (ZEN_SCALING=off)
--   zen_ticker     on_scale_tick      sweeps, resends and prunes the outbox, prunes refusals, keeps the
--                                     tick's clock and the prices; runs the scaling passes
--
-- What all four share: every decision about a job goes through the same code (zen.jobs.decisions:
-- apply, admission into a queue's quota, the dependencies an ended job releases, routing a start), so
-- each may read jobs and update their lifecycle columns, write history rows, queue usage and outgoing
-- messages. No role may delete a job or a history row, or rewrite what a
-- job asked for: job_id, user_id, cluster, queue, priority, gpus, request (and the columns generated
-- from it), request_hash, max_runtime_s and submitted_at are written once, by the submitter's INSERT.
-- A NOLOGIN role is made once per server (roles are not per database): an existing one is kept.

DO $$ BEGIN CREATE ROLE zen_submitter NOLOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
DO $$ BEGIN CREATE ROLE zen_heartbeat NOLOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
DO $$ BEGIN CREATE ROLE zen_stopper NOLOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
DO $$ BEGIN CREATE ROLE zen_ticker NOLOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;

GRANT USAGE ON SCHEMA public TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
-- Each function refuses to work on a schema older than its code (zen.store.migrate.schema_lag).
GRANT SELECT ON schema_migrations TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;

-- The job lifecycle, shared (above). A row lock (SELECT ... FOR UPDATE) needs UPDATE on a column: these.
GRANT SELECT, UPDATE (status, attempt, max_attempts, vm, region, zone, last_seq, last_heartbeat_at, queued_at,
                      started_at, finished_at, exit_code, message, start_published_at, preempted_by,
                      preemptions, start_regions, widen_at, start_vms, regions, hold, hold_until, retries,
                      gang, updated_at)
    ON jobs TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
GRANT INSERT ON jobs TO zen_submitter;
-- History is only written; an attempt's usage reads when its VM claimed it (heartbeat, tick), and a lost
-- attempt's late report whether the sweep lost it (heartbeat).
GRANT INSERT ON job_events TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
GRANT SELECT ON job_events TO zen_heartbeat, zen_ticker;
GRANT USAGE ON SEQUENCE job_events_id_seq TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
-- Admission decays and saves each queue's usage, whoever runs it (zen.jobs.queueing).
GRANT SELECT, INSERT, UPDATE (gpu_seconds, updated_at) ON queue_usage
    TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
-- Refused messages: recorded by the three message functions (the row's id read back); a VM's report
-- refused again for the same cause is counted on its first row (zen.store.rejections: heartbeats only,
-- which also read when a cause was last refused); pruned by the tick, which reads no payload.
GRANT INSERT, SELECT (id) ON rejected_messages TO zen_submitter, zen_stopper;
GRANT INSERT, SELECT (id, source, repeat_key, at, last_at, count), UPDATE (count, last_at) ON rejected_messages
    TO zen_heartbeat;
GRANT SELECT (id, at, last_at), DELETE ON rejected_messages TO zen_ticker;
GRANT USAGE ON SEQUENCE rejected_messages_id_seq TO zen_submitter, zen_heartbeat, zen_stopper;
-- The outbox: each function writes its messages and marks those it published (id and publish_attempts
-- read by the marks); only the tick reads the rows' bodies (its resend) and deletes sent rows.
GRANT INSERT, SELECT (id, publish_attempts), UPDATE (sent_at, publish_attempts, last_error) ON outbox
    TO zen_submitter, zen_heartbeat, zen_stopper;
GRANT SELECT, INSERT, UPDATE (sent_at, publish_attempts, last_error), DELETE ON outbox TO zen_ticker;
GRANT USAGE ON SEQUENCE outbox_id_seq TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
-- Stops that came before their job: remembered by the stop, taken by the submission (or by the stop
-- itself, when its job was submitted meanwhile, and by the tick), forgotten by the tick.
GRANT SELECT, INSERT, DELETE ON early_stops TO zen_stopper;
GRANT SELECT, DELETE ON early_stops TO zen_submitter, zen_ticker;
-- An attempt's usage is recorded when it ends: by a VM's report or the tick's sweep, never by a
-- submission or a stop (a stop asks the VM; its answer ends the attempt). A lost attempt's late final
-- report corrects its outcome (zen.jobs.late_final: heartbeats only).
GRANT SELECT, INSERT, UPDATE (outcome, vm_share) ON attempt_usage TO zen_heartbeat;
GRANT INSERT, SELECT (job_id, attempt), UPDATE (vm_share) ON attempt_usage TO zen_ticker;

-- VMs: the heartbeat writes a VM's row from its reports; routing reads them (warm caches: any decision
-- that publishes a start may offer it to a VM); the scaling pass forgets the rows of instances gone
-- from their MIG.
GRANT SELECT ON vms TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
GRANT INSERT, UPDATE (cluster, region, zone, state, job_id, attempt, jobs, cached_inputs, images, last_seq,
                      last_seen_at, idle_since)
    ON vms TO zen_heartbeat;
GRANT DELETE ON vms TO zen_submitter, zen_heartbeat, zen_ticker;
-- Routing reads the regions a stockout blocked (scaling_memory); any decision may route a start.
GRANT SELECT ON scaling_memory TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;
-- A VM being drained (scaled down) is offered no start and refused a claim.
GRANT SELECT ON vm_drains TO zen_submitter, zen_heartbeat, zen_stopper, zen_ticker;

-- The scaling pass (zen.scaling), run by the submitter, the heartbeat and the tick.
GRANT INSERT, UPDATE (memory, updated_at) ON scaling_memory TO zen_submitter, zen_heartbeat, zen_ticker;
GRANT SELECT, INSERT, UPDATE (last_seen_at), DELETE ON mig_instances TO zen_submitter, zen_heartbeat, zen_ticker;
-- An INSERT ... ON CONFLICT (name, first_seen_at) reads its conflict target's columns.
GRANT INSERT, SELECT (name, first_seen_at) ON vm_lifetimes TO zen_submitter, zen_heartbeat, zen_ticker;
GRANT INSERT, DELETE ON vm_drains TO zen_submitter, zen_heartbeat, zen_ticker;
GRANT INSERT ON scaling_decisions TO zen_submitter, zen_heartbeat, zen_ticker;
GRANT USAGE ON SEQUENCE scaling_decisions_id_seq TO zen_submitter, zen_heartbeat, zen_ticker;
GRANT SELECT, INSERT, UPDATE (asks) ON scaling_pass_asks TO zen_submitter, zen_heartbeat, zen_ticker;
GRANT SELECT ON tick_clock, vm_prices TO zen_submitter, zen_heartbeat, zen_ticker;

-- The tick's own: its clock (when Zen could hear again after a gap), and the catalog's prices.
GRANT INSERT, UPDATE (last_at, interval_s, back_at) ON tick_clock TO zen_ticker;
GRANT INSERT, UPDATE (usd_per_hour, fetched_at) ON vm_prices TO zen_ticker;
GRANT SELECT, UPDATE (tried_at, refreshed_at, error) ON vm_price_refresh TO zen_ticker;
