"""An agent whose clock ran ahead (within check_seq's 300 s, so accepted) and was stepped back by NTP across an agent
restart: its VM heartbeats draw seqs from the corrected clock, below the last one recorded, and are older than the
row's, which keeps its state; but each still counts as hearing the VM, when it was sent. Ignored whole, the VM, heard
every 30 s, looked silent to the planner and was deleted."""

from __future__ import annotations

from tests.test_heartbeat_seq import ms, vm_beat, vm_row


def test_vm_heartbeats_after_a_clock_stepped_back_still_count_as_heard(functions, zen, clock):
    functions.heartbeat(vm_beat("IDLE", ms(clock) + 240_000, clock()))  # 4 minutes ahead: accepted
    clock.advance(30)  # NTP steps the clock back; the agent restarts (or not: a new process, its counter from 0)
    for _ in range(7):  # 3.5 minutes of VM heartbeats every 30 s, from the corrected clock
        functions.heartbeat(vm_beat("IDLE", ms(clock), clock()))
        clock.advance(30)
    heard = vm_row(zen, "vm-b")["last_seen_at"]
    silent_s = (clock() - heard).total_seconds()
    assert silent_s <= 60, f"heard every 30 s, yet last_seen_at {heard} says silent for {silent_s:.0f} s (>= 180 s: deleted)"
