"""An agent that starts while docker cannot list containers (its daemon hung or down) cannot tell whether a job's
container an earlier agent started runs on, holding the GPUs. When an agent of this boot ran an attempt on this VM
(its log of attempts, ``zen.agent.ranlog``, written since the boot), one may: the VM is powered off
(``zen.agent.leftover.fence_vm``), as for a container docker cannot remove. Retired only, the VM held that attempt
until Zen took it for lost, was deleted only after the rerun began, and the container ran on beside the rerun.
With no such attempt (a fresh VM, or one rebooted since: a reboot ends every container) the VM only retires, so a
VM whose docker never works is not powered off at every boot. The real agent, started as systemd starts it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_containers import ROOT, agent_env
from zen.agent import ranlog


def _boot_time() -> float:
    with open("/proc/stat") as stat:
        return float(next(line for line in stat if line.startswith("btime ")).split()[1])


@pytest.mark.parametrize("ran", ["this-boot", "before-boot", "never"])
def test_docker_that_cannot_list_powers_the_vm_off_after_an_attempt_ran_this_boot(tmp_path, ran):
    docker = FakeDocker(tmp_path / "docker")
    docker.fail("ps")  # docker cannot say which containers there are
    work = tmp_path / "work"
    if ran != "never":
        log = ranlog.path_for(work, "zen-vm-1")
        log.parent.mkdir(parents=True)
        log.write_text("3 train-0123456789ab\n")  # attempt 3 ran here; its end is not known
        if ran == "before-boot":
            os.utime(log, (before := _boot_time() - 60, before))
    fence = tmp_path / "run" / "fence"
    fence.parent.mkdir()
    # No metadata server: the agent exits 2 after the leftovers (systemd restarts it), as one that crashes at start.
    result = subprocess.run([sys.executable, "-m", "zen.agent"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                            env=agent_env(docker, GCE_METADATA_HOST="127.0.0.1:9", ZEN_AGENT_FENCE_FILE=str(fence),
                                          ZEN_AGENT_WORK_DIR=str(work)))

    assert result.returncode == 2 and "could not be removed" in result.stderr, result.stderr[-2000:]
    if ran == "this-boot":
        assert fence.exists(), "the VM was not powered off: an earlier attempt's container may run beside its rerun"
        assert "docker cannot list" in fence.read_text()
    else:  # nothing of this boot can run: retired only, and a VM whose docker never works does not loop
        assert not fence.exists(), fence.read_text()
