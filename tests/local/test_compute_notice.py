"""The Compute stand-in's preemption notice: a VM's ``instance/preempted`` answers FALSE, then TRUE once it
is preempted, a ``wait_for_change`` long poll answering at that moment; its processes get SIGTERM with the
notice and SIGKILL ``preempt_notice_s`` later (GCE's ~30 s), not at the stop grace. Read as the agent reads
it (``zen.agent.identity.MetadataServer``)."""

from __future__ import annotations

import sys
import textwrap
import threading
import time

import pytest

from tests.local.test_compute_standin import BASE, BOOT_S, Cloud, merged, pid_alive
from tests.waiting import wait_for
from zen.agent.identity import PREEMPTED, MetadataServer
from zen_dev.local.compute import ComputeStandIn, ManualClock

# A VM that ignores SIGTERM (an agent busy saving a checkpoint): only SIGKILL ends it. ``<vm>.ready`` once its handler
# is in place: a SIGTERM before (its interpreter still starting, on a loaded machine) would end it at once.
STUBBORN = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: open(sys.argv[1] + "/" + os.environ["ZEN_VM_NAME"], "w").write("term"))
    open(sys.argv[1] + "/" + os.environ["ZEN_VM_NAME"] + ".ready", "w").close()
    time.sleep(300)
""")


@pytest.fixture
def cloud(tmp_path):
    scenario = merged(BASE, {"startup": {"command": [sys.executable, "-c", STUBBORN, str(tmp_path)],
                                         "stop_grace_s": 0.2}})
    standin = ComputeStandIn(scenario, clock=ManualClock(), log_dir=tmp_path / "vm-logs", preempt_notice_s=2.0)
    yield Cloud(standin.start())
    standin.stop()


def test_a_preemption_turns_instance_preempted_true_and_answers_the_long_poll(cloud, tmp_path):
    cloud.resize(1)
    cloud.advance(BOOT_S + 1)
    (inst,) = cloud.instances()
    metadata = MetadataServer(f"{cloud.standin.endpoint}/zen-local/vms/{inst.name}")
    pid = wait_for(lambda: cloud.standin.vm_pid(inst.name), what="the VM's process")
    wait_for((tmp_path / f"{inst.name}.ready").exists, what="the VM's SIGTERM handler in place")
    assert metadata.get(PREEMPTED) == "FALSE"
    answers: list[tuple[str | None, float]] = []
    waiting = threading.Thread(target=lambda: answers.append((
        metadata.get(f"{PREEMPTED}?wait_for_change=true&timeout_sec=20", timeout_s=25), time.monotonic())))
    waiting.start()
    time.sleep(0.3)
    assert not answers  # it waits for the change

    noticed = time.monotonic()
    cloud.maintenance(inst)
    waiting.join(10)

    [(preempted, at)] = answers
    assert preempted == "TRUE" and at - noticed < 1.0
    assert metadata.get(PREEMPTED) == "TRUE"
    wait_for(lambda: (tmp_path / inst.name).exists(), what="SIGTERM with the notice")
    time.sleep(max(0.0, noticed + 1.0 - time.monotonic()))  # from the notice, not from when its handler ran
    assert pid_alive(pid)  # past the stop grace (0.2 s): the notice's time is the VM's
    wait_for(lambda: not pid_alive(pid), timeout_s=5, what="SIGKILL after preempt_notice_s")

    cloud.advance(10)  # preempt_stop_s: the MIG recreates it, not preempted
    cloud.advance(BOOT_S)
    assert metadata.get(PREEMPTED) == "FALSE"


def test_an_unknown_vm_has_no_metadata(cloud):
    assert MetadataServer(f"{cloud.standin.endpoint}/zen-local/vms/nope").get(PREEMPTED) is None  # 404
