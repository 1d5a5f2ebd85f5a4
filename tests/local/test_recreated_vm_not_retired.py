"""A VM the Compute stand-in recreates after a preemption boots anew, as GCE's does: its agent must not take its
predecessor's retirement (``zen.agent.retired``) for its own. GCE's recreated VM has a new boot id and a new disk; a
stand-in VM is a process on this machine, under the name it had, sharing the machine's boot id and the stack's work
directory. Its predecessor retired (a pull limit reached on its last job), the recreated VM's agent read that mark as
an earlier agent's of its boot: RETIRED from its first heartbeat, and Zen deleted it, where production's recreated
VM takes jobs (``vm_is_draining``: a claim drawn after the RETIRED is a recreated VM's)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from tests.local.test_compute_standin import BASE, BOOT_S, MIG, Cloud, merged
from tests.waiting import wait_for
from zen_dev.local.compute import ComputeStandIn, ManualClock

# Each boot says what retirement its agent would start with, then retires the VM, as a pull limit reached does.
AGENT = textwrap.dedent("""
    import json, os, sys, time
    from zen.agent.retired import RetiredMark, path_for
    from zen.agent.settings import work_dir_of
    mark = RetiredMark(path_for(work_dir_of(os.environ), os.environ["ZEN_VM_NAME"]))
    earlier = mark.load()
    mark.keep("2 jobs in 24 h (limit 2)")
    with open(sys.argv[1], "a") as out:
        out.write(json.dumps({"pid": os.getpid(), "earlier": earlier}) + "\\n")
    time.sleep(120)
""")


def boots(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_vm_recreated_after_its_preemption_does_not_start_retired(tmp_path):
    said = tmp_path / "boots.jsonl"
    scenario = merged(BASE, {
        "startup": {"command": [sys.executable, "-c", AGENT, str(said)],
                    "env": {"ZEN_AGENT_WORK_DIR": str(tmp_path / "vms")}},  # as `zen local up` gives every VM
        "faults": {"preemptions": {"at": [{"at_s": 100, "mig": MIG}]}}})
    standin = ComputeStandIn(scenario, clock=ManualClock(), log_dir=tmp_path / "vm-logs").start()
    try:
        cloud = Cloud(standin)
        cloud.resize(1)
        cloud.advance(BOOT_S)
        (first,) = wait_for(lambda: boots(said), what="the first boot's agent")
        assert first["earlier"] is None
        cloud.advance(100 - BOOT_S)  # preempted; the MIG recreates it under its name
        cloud.advance(10 + BOOT_S)
        records = wait_for(lambda: len(boots(said)) == 2 and boots(said), what="the recreated VM's agent")
        assert records[1]["earlier"] is None, records  # a new boot: its agent decides afresh
    finally:
        standin.stop()
