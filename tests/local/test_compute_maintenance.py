"""A host maintenance on a standard VM of the Compute stand-in, as GCE carries it out for a VM with GPUs, which cannot
live-migrate: ``simulateMaintenanceEvent`` turns its ``instance/maintenance-event`` from ``NONE`` to
``TERMINATE_ON_HOST_MAINTENANCE`` (a ``wait_for_change`` long poll answering at that moment), its processes run on
through the notice, and ``maintenance_notice_s`` later (GCE's hour for a GPU VM) it is terminated (SIGTERM), then
restarts under its name (``automaticRestart``). Read as the agent reads it (``zen.agent.identity.MetadataServer``)."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from tests.local.test_compute_notice import STUBBORN
from tests.local.test_compute_standin import BASE, BOOT_S, PROJECT, REGION, Cloud, merged, pid_alive
from tests.waiting import wait_for
from zen.agent.identity import MAINTENANCE_EVENT, PREEMPTED, TERMINATE_ON_HOST_MAINTENANCE, MetadataServer
from zen.core.config import ZenConfig
from zen_dev.local.compute import ComputeStandIn, ManualClock

NOTICE_S = 1.5
STANDARD = {"project": PROJECT, "clusters": [{
    "name": "4xa100-40gb", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4, "machine_type": "a2-highgpu-4g",
    "regions": [REGION], "max_vms_per_region": 2, "max_vms": 2, "provisioning": ["standard"]}]}


def standard_standin(tmp_path, **kw) -> tuple[ComputeStandIn, str]:
    """A stand-in serving one standard MIG (the scenario's own MIG left out); and that MIG's name."""
    config = ZenConfig.model_validate(STANDARD)
    scenario = {key: value for key, value in BASE.items() if key != "migs"}
    if "startup" in kw:
        scenario = merged(scenario, {"startup": kw.pop("startup")})
    standin = ComputeStandIn(scenario, clock=ManualClock(), log_dir=tmp_path / "vm-logs", config=config, **kw)
    return standin, config.clusters[0].mig_name(REGION, "standard")


@pytest.fixture
def cloud(tmp_path):
    standin, mig = standard_standin(tmp_path, maintenance_notice_s=NOTICE_S, startup={
        "command": [sys.executable, "-c", STUBBORN, str(tmp_path)], "stop_grace_s": 0.2})
    yield Cloud(standin.start()), mig
    standin.stop()


def test_a_standard_vm_gets_the_maintenance_notice_then_is_terminated_and_restarts_under_its_name(cloud, tmp_path):
    cloud, mig = cloud
    cloud.resize(1, mig=mig)
    cloud.advance(BOOT_S + 1)
    (inst,) = cloud.instances(mig=mig)
    metadata = MetadataServer(f"{cloud.standin.endpoint}/zen-local/vms/{inst.name}")
    pid = wait_for(lambda: cloud.standin.vm_pid(inst.name), what="the VM's process")
    wait_for((tmp_path / f"{inst.name}.ready").exists, what="the VM's SIGTERM handler in place")
    assert metadata.get(MAINTENANCE_EVENT) == "NONE"
    answers: list[str | None] = []
    waiting = threading.Thread(target=lambda: answers.append(
        metadata.get(f"{MAINTENANCE_EVENT}?wait_for_change=true&timeout_sec=20", timeout_s=25)))
    waiting.start()
    time.sleep(0.3)
    assert not answers  # it waits for the change

    cloud.maintenance(inst)
    waiting.join(10)
    assert answers == [TERMINATE_ON_HOST_MAINTENANCE]
    assert metadata.get(PREEMPTED) == "FALSE"  # not a preemption
    assert not (tmp_path / inst.name).exists() and pid_alive(pid)  # the notice alone: no SIGTERM with it

    wait_for(lambda: (tmp_path / inst.name).exists(), timeout_s=NOTICE_S + 10, what="SIGTERM at the notice's end")
    wait_for(lambda: not pid_alive(pid), timeout_s=5, what="the VM terminated")
    cloud.advance(10)  # preempt_stop_s: TERMINATED, restarting under its name
    assert [(i.name, i.instance_status) for i in cloud.instances(mig=mig)] == [(inst.name, "PROVISIONING")]
    cloud.advance(BOOT_S)
    (again,) = cloud.instances(mig=mig)
    assert (again.name, again.instance_status, again.current_action) == (inst.name, "RUNNING", "NONE")
    assert metadata.get(MAINTENANCE_EVENT) == "NONE"
    new_pid = wait_for(lambda: cloud.standin.vm_pid(inst.name), what="the restarted VM's process")
    assert new_pid != pid


def test_the_template_says_every_model_terminates_on_host_maintenance(cloud):
    cloud, mig = cloud
    templates = compute_v1.InstanceTemplatesClient(transport=compute_v1.services.instance_templates.transports.rest
                                                   .InstanceTemplatesRestTransport(host=cloud.standin.endpoint,
                                                                                   credentials=AnonymousCredentials(),
                                                                                   url_scheme="http"))
    scheduling = templates.get(project=PROJECT, instance_template=f"{mig}-template").properties.scheduling
    assert (scheduling.on_host_maintenance, scheduling.automatic_restart) == ("TERMINATE", True)
