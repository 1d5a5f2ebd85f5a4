"""An agent that crashes and restarts without end (a fault on every start; systemd's restarts are slower
than its start limit) says IDLE, then STOPPING as it dies, then IDLE again: each IDLE started the VM's idle
time anew, the scale-down never saw it idle for its keep, and the VM was billed for ever. Its STOPPING now
keeps an idle VM's ``idle_since``; a job (BUSY) still ends it."""

from __future__ import annotations

from tests.test_heartbeat_seq import ms, vm_beat, vm_row


def test_an_agents_stopping_keeps_its_vms_idle_time_and_a_job_ends_it(functions, zen, clock):
    first = clock()
    functions.heartbeat(vm_beat("IDLE", ms(clock), clock()))
    for _ in range(3):  # a crash (STOPPING), systemd's restart, the new agent's IDLE from its own start
        clock.advance(10)
        functions.heartbeat(vm_beat("STOPPING", ms(clock), clock()))
        clock.advance(10)
        functions.heartbeat(vm_beat("IDLE", ms(clock), clock()))
    assert vm_row(zen, "vm-b")["idle_since"] == first
    clock.advance(10)
    functions.heartbeat(vm_beat("BUSY", ms(clock), clock()))
    clock.advance(10)
    functions.heartbeat(vm_beat("IDLE", ms(clock), clock()))
    assert vm_row(zen, "vm-b")["idle_since"] == clock()  # it ran a job: idle from its end


def test_a_vm_its_mig_recreated_is_idle_from_its_own_start(functions, zen, clock):
    """A preempted spot VM says STOPPING too, and its MIG recreates it under the same name (the same row): its first
    IDLE, minutes or hours later (a boot, through a stockout), is a new VM's, idle from its start, not since before it
    existed (the scale-down took the VM that just booted for one idle for hours)."""
    functions.heartbeat(vm_beat("IDLE", ms(clock), clock()))
    clock.advance(60)
    functions.heartbeat(vm_beat("STOPPING", ms(clock), clock()))  # preempted: its agent's last word
    clock.advance(3 * 3600)
    functions.heartbeat(vm_beat("IDLE", ms(clock), clock()))
    assert vm_row(zen, "vm-b")["idle_since"] == clock()
