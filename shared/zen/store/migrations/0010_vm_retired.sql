-- Agent pull limits (issue 15): an agent past its jobs or GPU-hours per day reports its VM RETIRED
-- (it takes no more jobs; the scaling manager deletes it once it holds none).
ALTER TABLE vms DROP CONSTRAINT vms_state_check;
ALTER TABLE vms ADD CONSTRAINT vms_state_check CHECK (state IN ('IDLE','BUSY','STOPPING','RETIRED'));
