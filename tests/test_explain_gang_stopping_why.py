"""`zen explain` (and the console's job line) of a gang stopping for a failed node says why from the change into
STOPPING; it took the history's last row into STOPPING, which a later note is too: a node that gave its part back
unstarted while the others stop ("vm-1 gave its part back unstarted while the gang stops") was given as the
reason the gang stops, and the failure that stops it was no longer said."""

from __future__ import annotations

from tests.messages import heartbeat, job_request
from tests.test_explain_stopping import why
from tests.test_given_back_claims import T, job, vm_beat


def test_a_gang_stopping_for_a_failed_node_says_so_after_a_part_given_back(functions, zen):
    functions.submit(job_request("g", nodes=3))
    for seq, (vm, ip) in enumerate((("vm-1", "10.0.0.1"), ("vm-2", "10.0.0.2"), ("vm-3", "10.0.0.3"))):
        functions.heartbeat(heartbeat("g", "CLAIMED", T + seq, vm=vm, ip=ip))
    for vm in ("vm-2", "vm-3"):  # vm-1 never starts its part
        functions.heartbeat(heartbeat("g", "RUNNING", T + 10, vm=vm))
    functions.heartbeat(heartbeat("g", "FAILED", T + 11, vm="vm-2", exit_code=7, message="boom"))
    assert job(zen, "g").status.value == "STOPPING"
    functions.heartbeat(vm_beat("vm-1", T + 1_000, ("g", 1)))  # its VM gives its part back, unstarted
    assert job(zen, "g").status.value == "STOPPING"  # vm-3 has not answered yet
    line = why(zen, "g")
    assert "stopping: node 1 (vm-2) failed: exit code 7; the other nodes are stopped" in line, line
    assert "gave its part back" not in line, line
