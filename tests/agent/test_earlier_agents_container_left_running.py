"""An agent that starts (systemd restarted it after a crash, an OOM kill, an upgrade, a ``systemctl restart``) and
finds a job's container an earlier agent left, which docker cannot remove and does not say has stopped, powers the
VM off (``zen.agent.leftover.fence_vm``), as a fenced attempt's left container does. Nobody reports that attempt
any more: Zen takes it for lost once its reports stop and runs the job again elsewhere. Retired only, the VM held
the job until then, was deleted only after the requeue (``zen.scaling.vms.leftovers``: a VM holding a job is not
deleted), and the container ran on beside the rerun. A container docker says has stopped powers nothing off: the VM
retires as before. The real agent, started as systemd starts it, against a stand-in docker (``fakedocker``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.agent.fakedocker import FakeDocker
from tests.agent.test_containers import ROOT, agent_env

LEFT = "zen-train-0123456789ab-3"  # attempt 3 of a job, whose agent died while it ran


@pytest.mark.parametrize("exited", [False, True], ids=["still-running", "stopped"])
def test_a_container_an_earlier_agent_left_running_that_docker_cannot_remove_powers_the_vm_off(tmp_path, exited):
    docker = FakeDocker(tmp_path / "docker")
    docker.add(LEFT, "c3", exited=exited)
    docker.fail("rm")  # a failing daemon: it lists the container, and cannot remove it
    fence = tmp_path / "run" / "fence"
    fence.parent.mkdir()
    # No metadata server: the agent exits 2 after the leftovers (systemd restarts it), as one that crashes at start.
    result = subprocess.run([sys.executable, "-m", "zen.agent"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                            env=agent_env(docker, GCE_METADATA_HOST="127.0.0.1:9", ZEN_AGENT_FENCE_FILE=str(fence)))

    assert result.returncode == 2 and "could not be removed" in result.stderr, result.stderr[-2000:]
    assert docker.names() == [LEFT]
    if exited:  # docker says it runs no more: no power-off (the VM retires, as before)
        assert not fence.exists()
    else:
        assert fence.exists(), "the VM was not powered off: the container runs on beside the job's rerun"
        assert "c3" in fence.read_text()
