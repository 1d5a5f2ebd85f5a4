-- A gang's node in flight, defined once: a VM whose agent's last word is BUSY with an assembling gang's current
-- attempt while it is not yet one of the gang's nodes (zen.core.gang), where a claim of its may be taken (the
-- region of the gang's first node, else one the gang allows) and not drained (a drained VM's claim is refused).
-- The agent holds the gang's start and its claim is on the way: sent apart from that word, it may be handled
-- later (it waits on the job's lock while another node claims). The scaling pass's demand counts it as one of
-- the gang's nodes (queued_demand), and so does the room the tick gives an assembling gang (gang_nodes_in_flight):
-- the pass sees its VM busy, so counted as still missing it had the gang want a VM more than it lacks. A claim
-- refused after all makes its agent say IDLE at once: it is no node in flight then.
-- LANGUAGE sql, STABLE, one SELECT of one expression: inlined where it is called.
CREATE FUNCTION gang_node_in_flight(vm vms, job jobs) RETURNS boolean
LANGUAGE sql STABLE AS $$
SELECT job.status = 'QUEUED' AND job.nodes > 1 AND vm.cluster = job.cluster AND vm.state = 'BUSY'
   AND vm.job_id = job.job_id AND vm.attempt = job.attempt
   AND NOT COALESCE(job.gang, '[]') @> jsonb_build_array(jsonb_build_object('vm', vm.name))
   AND vm.region = COALESCE(job.gang -> 0 ->> 'region', vm.region)
   AND job.regions @> jsonb_build_array(vm.region)
   AND NOT EXISTS (SELECT 1 FROM vm_drains WHERE vm_drains.name = vm.name)
$$;
