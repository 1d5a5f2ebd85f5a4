-- The jobs that hold a VM, defined once: the scaling pass's list of a cluster's held VMs (held_vms_of_cluster)
-- and the drain before a delete (vm_holds_job) select from it, so the two never disagree on which VM may go.
-- A job assigned, running or stopping holds its VM. A gang holds every node's VM, and that of a VM that claimed a
-- part of one assembling (zen.core.gang), but not a node's that sent its final report: that VM is idle while the
-- gang runs on. Neither holds a RETIRED VM whose stopping job (a gang's node: GangNode.left_running) says its
-- container may still run (left_running: zen.core.reports.LEFT_RUNNING, passed in by the caller): deleting that VM
-- is what ends it, and the job is rerun only once the VM is silent (zen.agent.leftover). A NULL message, or a node
-- written before the mark existed, is never taken for it.
-- LANGUAGE sql, STABLE, not STRICT, one SELECT: the planner inlines it where it is called, so a caller's
-- WHERE cluster = ... or vm = ... reaches the jobs indexes (tests/test_query_plans.py checks the plans).
CREATE FUNCTION vm_holders(left_running text) RETURNS TABLE (vm text, job_id text, cluster text)
LANGUAGE sql STABLE AS $$
SELECT jobs.vm, jobs.job_id, jobs.cluster FROM jobs
WHERE jobs.status IN ('ASSIGNED','RUNNING','STOPPING') AND jobs.vm IS NOT NULL AND jobs.gang IS NULL
  AND NOT (jobs.status = 'STOPPING' AND jobs.message IS NOT DISTINCT FROM left_running AND EXISTS (
      SELECT 1 FROM vms WHERE vms.name = jobs.vm AND vms.state = 'RETIRED'))
UNION ALL
SELECT node ->> 'vm', jobs.job_id, jobs.cluster FROM jobs, jsonb_array_elements(jobs.gang) AS node
WHERE jobs.gang IS NOT NULL AND jobs.status IN ('QUEUED','ASSIGNED','RUNNING','STOPPING')
  AND COALESCE(node ->> 'status', 'CLAIMED') NOT IN ('SUCCEEDED','FAILED','STOPPED','PREEMPTED','GAVE_BACK')
  AND NOT (jobs.status = 'STOPPING' AND node ->> 'left_running' IS NOT DISTINCT FROM 'true' AND EXISTS (
      SELECT 1 FROM vms WHERE vms.name = node ->> 'vm' AND vms.state = 'RETIRED'))
$$;
