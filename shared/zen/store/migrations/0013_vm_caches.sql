-- Warm caches (issue 15, zen.agent.cache): what each VM's agent last said its cache holds: the job
-- inputs (gs:// URIs as jobs name them) whose every object it keeps, and the images it ran. zen.routing
-- sends a job's start first to the regions of idle VMs that hold its inputs or its image.
ALTER TABLE vms ADD COLUMN cached_inputs jsonb;
ALTER TABLE vms ADD COLUMN images jsonb;
