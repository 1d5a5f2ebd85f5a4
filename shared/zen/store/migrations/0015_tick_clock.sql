-- When the scale tick last ran, and when Zen came back after a gap (zen.sweeps.sweep_lost): while
-- Postgres (or the functions' way to it) is down, no heartbeat can be recorded, so a VM's silence
-- during that time says nothing about the VM. One row.
CREATE TABLE tick_clock (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    last_at    timestamptz NOT NULL,
    interval_s double precision,  -- the schedule as the ticks see it (longest recent interval, decaying)
    back_at    timestamptz        -- the first tick after a gap; NULL: none seen
);
